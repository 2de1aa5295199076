"""A private package index on 127.0.0.1: the PEP 503 simple layout over plain HTTP."""

from __future__ import annotations

import functools
import hashlib
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@contextmanager
def simple_index(root: Path, *wheels: Path) -> Iterator[tuple[str, list[str]]]:
    """Serve ``wheels`` at ``http://127.0.0.1:<port>/simple/``; yields the URL and the list
    of paths requested so far (the test reads which files pip fetched)."""
    projects: dict[str, list[Path]] = {}
    for wheel in wheels:
        projects.setdefault(wheel.name.split("-")[0].replace("_", "-").lower(), []).append(wheel)
    links = []
    for project, files in projects.items():
        folder = root / "simple" / project
        folder.mkdir(parents=True)
        anchors = []
        for wheel in files:
            shutil.copyfile(wheel, folder / wheel.name)
            digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
            anchors.append(f'<a href="{wheel.name}#sha256={digest}">{wheel.name}</a>')
        (folder / "index.html").write_text("<!DOCTYPE html><html><body>\n" + "\n".join(anchors) + "\n</body></html>\n")
        links.append(f'<a href="{project}/">{project}</a>')
    (root / "simple" / "index.html").write_text(
        "<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n"
    )

    requested: list[str] = []

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            requested.append(self.path)

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/", requested
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
