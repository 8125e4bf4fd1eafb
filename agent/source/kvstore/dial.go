package kvstore

import (
	"context"
	"net"
	"strings"

	"google.golang.org/grpc"
)

func grpcDialer(d func(ctx context.Context, addr string) (net.Conn, error)) grpc.DialOption {
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		if i := strings.Index(addr, "://"); i >= 0 {
			addr = addr[i+3:]
		}
		return d(ctx, addr)
	})
}
