#!/usr/bin/env python3
"""Loopback stand-in for the Hugging Face Hub (python3 standard library only).

Serves every directory ROOT/<org>/<name> as the repository "org/name" at revision "main", and
ROOT/<org>/<name>@<rev> as revision <rev> of the same repository (a branch or tag). Each revision
gets a deterministic 40-hex commit id computed from its file list and contents; a request for that
commit id resolves to the same revision. A <rev> that is itself a 40-hex commit id is served as that
commit (so a pinned revision such as e2e/cells.tsv's can be served with other files).

Endpoints, with the shapes huggingface.co uses:
  GET  /api/models/<org>/<name>[/revision/<rev>]    model info: id, sha, siblings[{rfilename}]
  HEAD|GET /<org>/<name>/resolve/<rev>/<file>       regular files: 200 with ETag = git blob sha1;
                                                    LFS files (*.safetensors, *.bin, >= 1 MiB):
                                                    302 to /_blobs/<sha256>, X-Linked-Etag,
                                                    X-Linked-Size; always X-Repo-Commit
  HEAD|GET /_blobs/<sha256>                         the LFS bytes ("CDN"), Range supported
Errors carry X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo).

Listens on 127.0.0.1 only, on an ephemeral port unless --port is given, and prints
"PORT <n>" on stdout once it accepts connections. Fault knobs (--faults FILE, JSON object):
  "fail_500":  {"<file name>": N}  the first N resolve/blob GETs of that file answer 500
  "cut":       {"<file name>": N}  the first N content GETs of that file send half, then close
  "stall":     {"<file name>": N}  the first N content GETs send half, then go silent for
                                   "stall_seconds" (default 5) before closing
  "corrupt":   ["<file name>"]     the content served has one byte flipped (headers stay right)
  "gated":     {"org/name": "<token>"}  file requests get 401 without a token, 403 with another
  "extra_siblings": {"org/name": ["../evil", ...]}  added to the model info's sibling list
  "throttle_bps": N                content is sent at about N bytes per second
Every request is appended to --log FILE as one JSON line {method, path, range, status}.
--manifest FILE writes {"org/name": {"<rev>": {"commit", "files": {name: {oid, lfs, size}}}}}.
"""
import argparse
import hashlib
import http.server
import json
import os
import re
import sys
import threading
import time
import urllib.parse

LFS_MIN_SIZE = 1 << 20


def is_lfs(name, size):
    return name.endswith((".safetensors", ".bin", ".gguf")) or size >= LFS_MIN_SIZE


def git_blob_sha1(data):
    h = hashlib.sha1()
    h.update(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


class Revision:
    def __init__(self, repo, rev, path):
        self.repo, self.rev, self.path = repo, rev, path
        self.files = {}  # name -> {oid, lfs, size, data}
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames.sort()
            for fn in sorted(filenames):
                full = os.path.join(dirpath, fn)
                name = os.path.relpath(full, path).replace(os.sep, "/")
                with open(full, "rb") as f:
                    data = f.read()
                lfs = is_lfs(name, len(data))
                oid = hashlib.sha256(data).hexdigest() if lfs else git_blob_sha1(data)
                self.files[name] = {"oid": oid, "lfs": lfs, "size": len(data), "data": data}
        h = hashlib.sha1()
        h.update(repo.encode() + b"@" + rev.encode() + b"\n")
        for name in sorted(self.files):
            h.update(("%s %s\n" % (name, self.files[name]["oid"])).encode())
        self.commit = rev if re.fullmatch(r"[0-9a-f]{40}", rev) else h.hexdigest()


class Hub:
    def __init__(self, root, faults):
        self.repos = {}  # "org/name" -> {rev: Revision}
        self.blobs = {}  # sha256 -> (name, data)
        for org in sorted(os.listdir(root)):
            org_dir = os.path.join(root, org)
            if not os.path.isdir(org_dir):
                continue
            for entry in sorted(os.listdir(org_dir)):
                full = os.path.join(org_dir, entry)
                if not os.path.isdir(full):
                    continue
                name, _, rev = entry.partition("@")
                repo = org + "/" + name
                r = Revision(repo, rev or "main", full)
                self.repos.setdefault(repo, {})[r.rev] = r
                for fname, info in r.files.items():
                    if info["lfs"]:
                        self.blobs[info["oid"]] = (fname, info["data"])
        self.faults = faults
        self.counters = {}
        self.lock = threading.Lock()

    def find(self, repo, rev):
        revs = self.repos.get(repo)
        if revs is None:
            return None, "RepoNotFound"
        if rev in revs:
            return revs[rev], None
        for r in revs.values():
            if r.commit == rev:
                return r, None
        return None, "RevisionNotFound"

    def take(self, kind, name):
        """Counts down the fault budget of (kind, file name); True while some is left."""
        budget = self.faults.get(kind, {}).get(name, 0)
        with self.lock:
            used = self.counters.get((kind, name), 0)
            if used < budget:
                self.counters[(kind, name)] = used + 1
                return True
        return False


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub = None
    log_path = None
    log_lock = threading.Lock()

    def log_message(self, fmt, *args):  # quiet: requests go to --log
        pass

    def record(self, status):
        if not self.log_path:
            return
        line = json.dumps({"method": self.command, "path": self.path,
                           "range": self.headers.get("Range"), "status": status})
        with self.log_lock:
            with open(self.log_path, "a") as f:
                f.write(line + "\n")

    def reply(self, status, headers=None, body=b"", send_body=True):
        self.record(status)
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body and self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status, code, message):
        body = json.dumps({"error": message}).encode()
        self.reply(status, {"X-Error-Code": code, "X-Error-Message": message,
                            "Content-Type": "application/json"}, body)

    def check_gate(self, repo):
        want = self.hub.faults.get("gated", {}).get(repo)
        if want is None:
            return True
        auth = self.headers.get("Authorization", "")
        if not auth:
            self.error(401, "GatedRepo", "Access to model %s is restricted. You must have "
                       "access to it and be authenticated to access it." % repo)
            return False
        if auth != "Bearer " + want:
            self.error(403, "GatedRepo", "Access to model %s is restricted and you are not in "
                       "the authorized list." % repo)
            return False
        return True

    def do_HEAD(self):
        self.handle_any()

    def do_GET(self):
        self.handle_any()

    def handle_any(self):
        try:
            self.route()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def route(self):
        path = urllib.parse.urlsplit(self.path).path
        parts = path.split("/")
        # /api/models/<org>/<name>[/revision/<rev>]
        if len(parts) >= 5 and parts[1] == "api" and parts[2] == "models":
            repo = parts[3] + "/" + parts[4]
            rev = "main"
            if len(parts) == 7 and parts[5] == "revision":
                rev = urllib.parse.unquote(parts[6])
            elif len(parts) != 5:
                return self.error(404, "EntryNotFound", "unknown endpoint")
            return self.model_info(repo, rev)
        # /<org>/<name>/resolve/<rev>/<file...>
        if len(parts) >= 6 and parts[3] == "resolve":
            repo = parts[1] + "/" + parts[2]
            rev = urllib.parse.unquote(parts[4])
            name = urllib.parse.unquote("/".join(parts[5:]))
            return self.resolve(repo, rev, name)
        if len(parts) == 3 and parts[1] == "_blobs":
            blob = self.hub.blobs.get(parts[2])
            if blob is None:
                return self.error(404, "EntryNotFound", "no such blob")
            name, data = blob
            return self.content(name, data, {"ETag": '"%s"' % parts[2]})
        return self.error(404, "RepoNotFound", "Repository not found")

    def model_info(self, repo, rev):
        # As on huggingface.co, a gated repo's metadata is public; its files are not.
        if repo not in self.hub.repos:
            return self.error(404, "RepoNotFound", "Repository not found")
        r, err = self.hub.find(repo, rev)
        if r is None:
            return self.error(404, err, "Invalid rev id: %s" % rev)
        siblings = [{"rfilename": n} for n in sorted(r.files)]
        siblings += [{"rfilename": n} for n in self.hub.faults.get("extra_siblings", {}).get(repo, [])]
        info = {"_id": repo, "id": repo, "modelId": repo, "sha": r.commit, "private": False,
                "gated": "manual" if repo in self.hub.faults.get("gated", {}) else False,
                "siblings": siblings}
        return self.reply(200, {"Content-Type": "application/json"}, json.dumps(info).encode())

    def resolve(self, repo, rev, name):
        if repo not in self.hub.repos:
            return self.error(404, "RepoNotFound", "Repository not found")
        if not self.check_gate(repo):
            return None
        r, err = self.hub.find(repo, rev)
        if r is None:
            return self.error(404, err, "Invalid rev id: %s" % rev)
        info = r.files.get(name)
        if info is None:
            return self.error(404, "EntryNotFound", "Entry not found")
        headers = {"X-Repo-Commit": r.commit}
        if info["lfs"]:
            headers.update({"ETag": '"%s"' % info["oid"], "X-Linked-Etag": '"%s"' % info["oid"],
                            "X-Linked-Size": str(info["size"]),
                            "Location": "/_blobs/%s?name=%s" % (info["oid"], urllib.parse.quote(name))})
            return self.reply(302, headers)
        headers["ETag"] = '"%s"' % info["oid"]
        return self.content(name, info["data"], headers)

    def content(self, name, data, headers):
        if self.command == "GET" and self.hub.take("fail_500", name):
            return self.error(500, "InternalError", "injected server error")
        if self.command == "GET" and name in self.hub.faults.get("corrupt", []) and data:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        start, status = 0, 200
        rng = self.headers.get("Range")
        if rng:
            if not rng.startswith("bytes=") or not rng[6:].endswith("-"):
                return self.error(416, "RangeNotSatisfiable", "only open ranges supported")
            start = int(rng[6:-1])
            if start >= len(data):
                return self.reply(416, {"Content-Range": "bytes */%d" % len(data)})
            status = 206
            headers["Content-Range"] = "bytes %d-%d/%d" % (start, len(data) - 1, len(data))
        body = data[start:]
        headers["Accept-Ranges"] = "bytes"
        headers["Content-Length"] = str(len(body))
        headers["Content-Type"] = "application/octet-stream"
        if self.command == "HEAD":
            return self.reply(status, headers)
        cut = self.hub.take("cut", name)
        stall = not cut and self.hub.take("stall", name)
        self.reply(status, headers, send_body=False)
        if cut or stall:
            body = body[: len(body) // 2]
        bps = self.hub.faults.get("throttle_bps", 0)
        step = 4096
        for i in range(0, len(body), step):
            self.wfile.write(body[i:i + step])
            if bps:
                self.wfile.flush()
                time.sleep(step / bps)
        self.wfile.flush()
        if stall:
            time.sleep(self.hub.faults.get("stall_seconds", 5))
        if cut or stall:
            self.close_connection = True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True, help="directory of <org>/<name>[@rev] repos")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--faults", help="JSON file with fault knobs")
    ap.add_argument("--log", help="append one JSON line per request")
    ap.add_argument("--manifest", help="write repos, commits and file oids here")
    args = ap.parse_args()
    faults = {}
    if args.faults:
        with open(args.faults) as f:
            faults = json.load(f)
    hub = Hub(args.root, faults)
    if args.manifest:
        out = {repo: {rev: {"commit": r.commit,
                            "files": {n: {k: v for k, v in i.items() if k != "data"}
                                      for n, i in r.files.items()}}
                      for rev, r in revs.items()}
               for repo, revs in hub.repos.items()}
        with open(args.manifest + ".tmp", "w") as f:
            json.dump(out, f, indent=1)
        os.replace(args.manifest + ".tmp", args.manifest)
    Handler.hub = hub
    Handler.log_path = args.log
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print("PORT %d" % server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    server.server_close()


if __name__ == "__main__":
    sys.exit(main())
