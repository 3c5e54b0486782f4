"""README's boto3 snippet (tests/snippets/boto3_client.py) runs as it is, with README's endpoint
127.0.0.1:9324 replaced by the test server's."""

import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

from conftest import endpoint

SNIPPET = Path(__file__).resolve().parent.parent / "snippets" / "boto3_client.py"


def test_boto3_snippet_runs():
    source = SNIPPET.read_text().replace("127.0.0.1:9324", urlparse(endpoint()).netloc)
    done = subprocess.run([sys.executable, "-"], input=source, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello\n"
