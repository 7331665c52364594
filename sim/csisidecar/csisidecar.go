// Package csisidecar holds stand-ins for the three Kubernetes CSI sidecars
// the Go module proxy does not carry (node-driver-registrar, livenessprobe,
// external-resizer), so the offline kind e2e runs the pillar-csi chart with
// its default images. Each does what the chart relies on, through the same
// APIs as the real one (docs/sidecars.md says what they leave out).
package csisidecar

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Dial connects to a CSI endpoint given as a path or a unix:// URL, as the
// sidecars' --csi-address accepts it.
func Dial(address string) (*grpc.ClientConn, error) {
	if !strings.Contains(address, "://") {
		address = "unix://" + address
	}
	return grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// DriverName asks the plugin for its name, retrying until it answers (the
// plugin container may start after the sidecar) or ctx ends.
func DriverName(ctx context.Context, conn *grpc.ClientConn) (string, error) {
	id := csi.NewIdentityClient(conn)
	for {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := id.GetPluginInfo(c, &csi.GetPluginInfoRequest{})
		cancel()
		if err == nil {
			if info.GetName() == "" {
				return "", fmt.Errorf("the plugin reports an empty name")
			}
			return info.GetName(), nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("GetPluginInfo: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(time.Second):
		}
	}
}
