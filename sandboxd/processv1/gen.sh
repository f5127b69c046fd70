#!/bin/sh
# Regenerates process.pb.go and process_grpc.pb.go from process.proto into
# the directory given (default: this one). Needs protoc (Debian's
# protobuf-compiler: apt-get install protobuf-compiler); the two plugins are
# built from the versions go.mod pins as tools (protoc-gen-go,
# protoc-gen-go-grpc), so the output depends only on go.mod and protoc.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
command -v protoc >/dev/null 2>&1 || { echo "gen.sh: protoc not found (apt-get install protobuf-compiler)" >&2; exit 1; }
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
cd "$here"
go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
go build -o "$bin/protoc-gen-go-grpc" google.golang.org/grpc/cmd/protoc-gen-go-grpc
protoc -I "$here" \
	--plugin=protoc-gen-go="$bin/protoc-gen-go" --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
	--go_out="$out" --go_opt=paths=source_relative \
	--go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
	process.proto
