"""A local stand-in for the Hugging Face Hub, speaking its protocol as
huggingface_hub (file_download.py, constants.py) uses it:

  GET  /api/models/{repo}/revision/{rev}   {"id", "sha", "siblings": [{"rfilename"}]}
  HEAD/GET /{repo}/resolve/{rev}/{file}    X-Repo-Commit; small files answer 200
       with ETag = the git blob id; large (LFS) files answer 302 to /cdn/...
       with X-Linked-Etag = SHA-256 and X-Linked-Size
  GET  /cdn/{sha256}                       the content, with Range (206)

Errors as the Hub sends them: 401 for a gated repo without the right
bearer token, 404 (X-Error-Code: RepoNotFound / EntryNotFound), 429.
Faults for the tests: `cut_once` (files whose first content transfer
stops halfway, the connection dropped), `corrupt` (files served with one
byte changed, the headers still naming the true digest)."""
import hashlib
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LFS_SUFFIXES = (".safetensors", ".gguf", ".bin")


def git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, files, token=None):
        self.files = dict(files)           # name -> bytes
        self.token = token                 # gated: this bearer token only
        digest = hashlib.sha1()
        for name in sorted(self.files):
            digest.update(name.encode() + b"\0" + self.files[name])
        self.commit = digest.hexdigest()


class HubMock:
    def __init__(self):
        self.repos = {}
        self.rate_limited = set()
        self.cut_once = set()      # (repo, file): first body transfer cut
        self.corrupt = set()       # (repo, file): body altered
        self.requests = []         # (method, path, Range, Authorization) in order
        self.content = {}          # sha256 -> (repo, file)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        # the content server is another host, as the Hub's CDN is: clients
        # follow the redirect there and send it no token
        self.cdn_url = "http://localhost:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add(self, repo_id, files, token=None):
        repo = Repo(files, token)
        self.repos[repo_id] = repo
        for name, data in repo.files.items():
            self.content[hashlib.sha256(data).hexdigest()] = (repo_id, name)
        return repo

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self.route(head=True)

            def do_GET(self):
                self.route(head=False)

            def error(self, status, code, message):
                body = json.dumps({"error": message}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("X-Error-Code", code)
                self.send_header("X-Error-Message", message)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def authorized(self, repo):
                if repo.token is None:
                    return True
                return self.headers.get("Authorization") == "Bearer " + repo.token

            def find_repo(self, repo_id):
                if repo_id in hub.rate_limited:
                    self.error(429, "RateLimited", "Too many requests")
                    return None
                repo = hub.repos.get(repo_id)
                if repo is None:
                    self.error(404, "RepoNotFound", "Repository not found")
                    return None
                if not self.authorized(repo):
                    self.error(401, "GatedRepo", "Access to this repository is restricted")
                    return None
                return repo

            def route(self, head):
                path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
                hub.requests.append((self.command, path, self.headers.get("Range"),
                                     self.headers.get("Authorization")))
                parts = path.strip("/").split("/")
                if parts[:2] == ["api", "models"] and "revision" in parts:
                    i = parts.index("revision")
                    return self.repo_info("/".join(parts[2:i]))
                if len(parts) >= 5 and parts[2] == "resolve":
                    return self.resolve("/".join(parts[:2]), parts[3], "/".join(parts[4:]))
                if len(parts) == 2 and parts[0] == "cdn":
                    return self.cdn(parts[1], head)
                self.error(404, "EntryNotFound", "no such route")

            def repo_info(self, repo_id):
                repo = self.find_repo(repo_id)
                if repo is None:
                    return
                body = json.dumps({
                    "id": repo_id, "modelId": repo_id, "sha": repo.commit,
                    "siblings": [{"rfilename": n} for n in sorted(repo.files)],
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def resolve(self, repo_id, revision, name):
                repo = self.find_repo(repo_id)
                if repo is None:
                    return
                if revision not in ("main", repo.commit):
                    return self.error(404, "RevisionNotFound", "Invalid rev id")
                data = repo.files.get(name)
                if data is None:
                    return self.error(404, "EntryNotFound", "Entry not found")
                if name.endswith(LFS_SUFFIXES):
                    sha = hashlib.sha256(data).hexdigest()
                    self.send_response(302)
                    self.send_header("X-Repo-Commit", repo.commit)
                    self.send_header("ETag", '"%s"' % git_blob_id(b"lfs pointer " + data[:16]))
                    self.send_header("X-Linked-Etag", '"%s"' % sha)
                    self.send_header("X-Linked-Size", str(len(data)))
                    self.send_header("Location", "%s/cdn/%s" % (hub.cdn_url, sha))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_body(repo_id, name, data, git_blob_id(data), repo.commit)

            def cdn(self, sha, head):
                if sha not in hub.content:
                    return self.error(404, "EntryNotFound", "no such blob")
                repo_id, name = hub.content[sha]
                self.send_body(repo_id, name, hub.repos[repo_id].files[name], sha, None,
                               head=head)

            def send_body(self, repo_id, name, data, etag, commit, head=None):
                head = self.command == "HEAD" if head is None else head
                key = (repo_id, name)
                if key in hub.corrupt:
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
                start = 0
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes=") and rng.endswith("-"):
                    start = int(rng[6:-1])
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", "bytes */%d" % len(data))
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range",
                                     "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
                else:
                    self.send_response(200)
                if commit:
                    self.send_header("X-Repo-Commit", commit)
                self.send_header("ETag", '"%s"' % etag)
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                if head:
                    return
                body = data[start:]
                if key in hub.cut_once:
                    hub.cut_once.discard(key)
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        return Handler
