// Package pycompat is the one home of sandbox-runtime's Python parity: the
// behaviours of CPython 3.11 and of the libraries the Python runtime image
// used, reproduced byte for byte so that the legacy API (protocol.md §5)
// answers as that image did, and so that /v1/files resolves paths the same
// way. It changes when the Python behaviour being matched changes, for
// nothing else.
//
//   - repr() and str() of strings, floats, lists and OSError (pyrepr.go, with
//     the tables generated from CPython by testdata/gen_golden.py);
//   - json.loads on bytes, reduced to what POST /execute reads (json.go);
//   - python-multipart 0.0.5's Content-Disposition parser with Starlette's
//     decoding (multipart.go);
//   - os.path.realpath, join and split, and the confinement of a request
//     path under the base directory built on them (paths.go);
//   - bytes.decode("utf-8", "replace") and urllib.parse.quote (text.go).
//
// It imports no other package of the project.
package pycompat
