// Package deploy holds Kubernetes manifests for sandbox-runtime: an
// agent-sandbox SandboxTemplate and a plain Pod running the Python image,
// and the token Secret they mount. It has no Go code of its own; its test
// parses the manifests and checks them against the daemon's flags and the
// real binary.
package deploy
