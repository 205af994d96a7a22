#!/usr/bin/env bash
# tools/run.sh NAME [ARGS...]: what `go run ./tools/NAME ARGS...` was before tools/ became a Go
# module of its own (tools/go.mod): builds the tool in the tools module (go's build cache makes
# a second run quick) into _output/tools/bin and runs it from the caller's working directory,
# so relative arguments (_output/bin/staticip, manifests/crds) mean what they meant.
#   tools/run.sh cnibench -staticip _output/bin/staticip
#   tools/run.sh kind/images --refs refs.txt ...
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: tools/run.sh NAME [ARGS...] (NAME: a main package under tools/, e.g. localcluster, kind/images)" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
name=${1#./}; name=${name#tools/}; name=${name%/}; shift
bin="$root/_output/tools/bin/${name//\//-}"
mkdir -p "$(dirname "$bin")"
go build -C "$root/tools" -o "$bin" "./$name"
exec "$bin" "$@"
