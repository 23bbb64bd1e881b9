"""Print, as one bash script, the README's two set-up blocks as written, with the checks CI adds.

The blocks are the fenced `sh` blocks after `<!-- setup: run -->` and `<!-- setup: test -->`.
Every line runs as written, in the README's order, in one shell (the venv the first line
activates stays active). The line that starts the server runs in the background until
`/healthz` answers 200, then the server is stopped: a server that cannot start fails the
run. After the test block's install, `ruff check .` and `mypy` run before its `pytest`,
and a check that the test install changed the version of nothing the run block installed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"<!-- setup: (run|test) -->\s*```sh\n(.*?)```", re.S)

PROBE = "python3 -c \"import urllib.request as u; u.urlopen('http://127.0.0.1:8080/healthz')\""
WAIT_FOR_SERVER = f"""server_pid=$!
for _ in $(seq 1 100); do
  if {PROBE} 2>/dev/null; then
    break
  fi
  kill -0 "$server_pid" 2>/dev/null || {{ echo "the server from the README exited" >&2; exit 1; }}
  sleep 0.3
done
{PROBE}
echo "README: the server answered /healthz"
kill "$server_pid"; wait "$server_pid" || true"""


# Every package the run block installed keeps its version through the test install.
SAME_VERSIONS = """python3 - "$installed" <<'CHECK'
import subprocess, sys
def versions(lines):
    return dict(line.split("==", 1) for line in lines if "==" in line)
before = versions(open(sys.argv[1]).read().split())
after = versions(subprocess.run([sys.executable, "-m", "pip", "freeze", "--all"],
                                capture_output=True, text=True, check=True).stdout.split())
changed = [f"{name} {before[name]} -> {after.get(name)}" for name in before
           if after.get(name) != before[name]]
if changed:
    sys.exit("the test install changed what `pip install .` installed: " + ", ".join(changed))
print("README: the test install changed no installed version")
CHECK"""


def script(readme: str) -> str:
    blocks = dict((name, text) for name, text in BLOCK.findall(readme))
    if set(blocks) != {"run", "test"}:
        raise SystemExit("README: the set-up blocks (<!-- setup: run/test --> + ```sh) are missing")
    lines = ["set -euo pipefail", f"cd {str(ROOT)!r}"]
    for raw in blocks["run"].splitlines():
        command = raw.split("  #")[0].rstrip()  # a trailing comment is not a command
        if not command:
            continue
        if command.startswith("context-proxy serve"):
            lines += [f"echo '+ {command}'", f"{command} &", WAIT_FOR_SERVER]
        else:
            lines += [f"echo '+ {command}'", command]
    lines.append('installed="$(mktemp)"; pip freeze --all > "$installed"')
    for raw in blocks["test"].splitlines():
        command = raw.split("  #")[0].rstrip()
        if not command:
            continue
        if command.split()[0] == "pytest":
            lines += ["echo '+ ruff check .'", "ruff check .", "echo '+ mypy'", "mypy"]
        lines += [f"echo '+ {command}'", command]
        if command.startswith("pip install"):
            lines.append(SAME_VERSIONS)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(script((ROOT / "README.md").read_text()))
