package main

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/sandbox-runtime/sandbox-runtime/sandboxd/processv1"
)

// grpcScenario times `echo hi` through sandboxd's gRPC Execute on the
// daemon (SANDBOXD_GRPC_ADDR) and on the naive server's grpc-go + os/exec
// ProcessService, beside os/exec. A daemon targeted with -addr serves none
// that this tool knows of: "not available".
func (b *bench) grpcScenario(ctx context.Context, d *daemon) error {
	const label = "echo hi: sandboxd gRPC Execute"
	if d.grpc == "" {
		fmt.Fprintln(b.log, "grpc: not available")
		b.add(row{measure: label, value: "not available", result: "n/a", goal: latencyGoal})
		return nil
	}
	return b.latencyOf(ctx, label, b.sides(d, b.grpcEcho, b.grpcEcho))
}

// grpcEcho runs `echo hi` with one Execute on d's gRPC listener (one
// connection per address, kept for the run, as an SDK keeps its channel).
func (b *bench) grpcEcho(ctx context.Context, d *daemon) error {
	if d.grpc == "" {
		return fmt.Errorf("%s serves no sandboxd gRPC", d.name)
	}
	if err := checkLoopback(d.grpc); err != nil {
		return err
	}
	b.grpcMu.Lock()
	if b.grpcs == nil {
		b.grpcs = map[string]*grpc.ClientConn{}
	}
	conn := b.grpcs[d.grpc]
	if conn == nil {
		var err error
		if conn, err = grpc.NewClient(d.grpc, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			b.grpcMu.Unlock()
			return err
		}
		b.grpcs[d.grpc] = conn
	}
	b.grpcMu.Unlock()
	res, err := pb.NewProcessServiceClient(conn).Execute(ctx, &pb.ExecuteRequest{Config: &pb.ProcessConfig{Command: []string{"echo", "hi"}}})
	if err != nil {
		return fmt.Errorf("gRPC Execute echo hi: %w", err)
	}
	if string(res.Stdout) != "hi\n" || res.ExitCode != 0 {
		return fmt.Errorf("gRPC Execute echo hi: stdout %q, exit %d", res.Stdout, res.ExitCode)
	}
	return nil
}
