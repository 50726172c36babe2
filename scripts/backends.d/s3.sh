# shellcheck shell=bash
# scripts/backends.d/s3.sh — `s3`: an S3-compatible object store (moto's server, from PyPI: no
# Debian package serves S3 with conditional writes) for locksmith-fence's tests of fenced
# objects (If-Match / If-None-Match puts). A server kind for scripts/backends (the interface is
# described in lib.sh).
#
# moto runs from a virtual environment made with the machine's python3 and its packages
# (--system-site-packages); when those have no moto with conditional writes (5.0.20 or later),
# `pip install 'moto[server]==S3_MOTO_PIN'` fills the environment from PyPI: one pinned version,
# so that a later moto cannot break a run without a commit. The environment stays in the state
# directory: the server's command line names it, which is how `down` knows the server is ours.

register_ids s3 single s3
need_command python3 python3
# Debian's python3 makes virtual environments only with python3-venv (ensurepip).
s3_python_has_venv() { python3 -c 'import venv, ensurepip' 2>/dev/null; }
need_check s3_python_has_venv python3-venv "python3's venv module"

S3_MOTO_MIN=5.0.20
S3_MOTO_PIN=5.2.1

s3_ports() { port 15000; }

# The environment's python has moto's server at S3_MOTO_MIN or later?
s3_has_moto() {
    "$1/bin/python" - "$S3_MOTO_MIN" <<'PY' 2>/dev/null
import sys
import moto.server  # noqa: F401 (the server's own dependencies: flask, werkzeug)
from importlib.metadata import version
have = tuple(int(p) for p in version("moto").split(".")[:3])
want = tuple(int(p) for p in sys.argv[1].split("."))
sys.exit(0 if have >= want else 1)
PY
}

s3_start() {
    local id=$1 venv="$STATE/$1/venv"
    if [[ ! -x $venv/bin/python ]]; then
        python3 -m venv --system-site-packages "$venv" >&2 || die "$id: python3 -m venv failed"
    fi
    if ! s3_has_moto "$venv"; then
        log "$id: installing moto[server]==$S3_MOTO_PIN from PyPI into $venv"
        "$venv/bin/python" -m pip install -q --timeout 60 --retries 5 "moto[server]==$S3_MOTO_PIN" >&2 ||
            die "$id: pip install moto[server]==$S3_MOTO_PIN failed"
    fi
    launch "$id" "$venv/bin/python" -m moto.server -H "$HOST" -p "$(client_port "$id")"
}

s3_ready() {
    # Any HTTP answer will do: moto lists its buckets on GET /.
    local answer
    answer=$(exec 3<>"/dev/tcp/$HOST/$(client_port "$1")" &&
        printf 'GET / HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3 &&
        timeout 2 head -c 12 <&3) 2>/dev/null || return 1
    [[ $answer == HTTP/1.* ]]
}

s3_exports() {
    [[ $1 == single ]] || return 0
    emit LOCKSMITH_TEST_S3 "http://$(address s3)"
}
