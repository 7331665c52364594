package csisidecar

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Registrar serves the kubelet's plugin-registration API on
// <Dir>/<driver>-reg.sock, announcing a CSI plugin at Endpoint (the
// plugin's socket as the kubelet sees it), as node-driver-registrar does.
type Registrar struct {
	Driver   string // from the plugin's GetPluginInfo
	Endpoint string // --kubelet-registration-path
	Dir      string // --plugin-registration-path
	Log      *slog.Logger

	failed chan error
	registerapi.UnimplementedRegistrationServer
}

// SocketPath is where the kubelet's plugin watcher finds the registrar.
func (r *Registrar) SocketPath() string { return filepath.Join(r.Dir, r.Driver+"-reg.sock") }

// Run serves until ctx ends, or fails when the kubelet reports that the
// registration failed (the pod restarts and registers again).
func (r *Registrar) Run(ctx context.Context) error {
	r.failed = make(chan error, 1)
	sock := r.SocketPath()
	if err := os.Remove(sock); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing the stale %s: %w", sock, err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	gs := grpc.NewServer()
	registerapi.RegisterRegistrationServer(gs, r)
	done := make(chan error, 1)
	go func() { done <- gs.Serve(lis) }()
	r.Log.Info("registration socket ready", "socket", sock, "driver", r.Driver, "endpoint", r.Endpoint)
	defer os.Remove(sock)
	select {
	case <-ctx.Done():
		gs.Stop()
		return nil
	case err := <-r.failed:
		gs.GracefulStop() // the kubelet gets its answer first
		return err
	case err := <-done:
		return err
	}
}

// GetInfo is the kubelet's first call.
func (r *Registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              r.Driver,
		Endpoint:          r.Endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

// NotifyRegistrationStatus receives the kubelet's verdict.
func (r *Registrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		r.Log.Error("the kubelet refused the registration", "error", s.Error)
		select {
		case r.failed <- fmt.Errorf("registration refused by the kubelet: %s", s.Error):
		default:
		}
	} else {
		r.Log.Info("registered with the kubelet", "driver", r.Driver)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}
