package main

import (
	"bytes"
	"context"
	"net"
	"os/exec"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/sandbox-runtime/sandbox-runtime/sandboxd/processv1"
)

// naiveProcess is the gRPC Execute a user would write with grpc-go and
// os/exec: run, buffer, answer. No limits, no group, no reaper.
type naiveProcess struct {
	pb.UnimplementedProcessServiceServer
}

func (naiveProcess) Execute(ctx context.Context, req *pb.ExecuteRequest) (*pb.ExecuteResponse, error) {
	argv := req.GetConfig().GetCommand()
	if len(argv) == 0 {
		return nil, status.Error(codes.InvalidArgument, "command is required")
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &pb.ExecuteResponse{ExitCode: int32(exitCode(err)), Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}, nil
}

// serveGRPC serves naiveProcess on addr and returns the bound address.
func serveGRPC(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	gs := grpc.NewServer()
	pb.RegisterProcessServiceServer(gs, naiveProcess{})
	go gs.Serve(ln)
	return ln.Addr().String(), nil
}
