package csisidecar

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// plugin is a CSI identity and controller service with scripted answers.
type plugin struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer

	mu         sync.Mutex
	ready      bool
	probeErr   error
	expandErr  error
	nodeExpand bool
	expands    []*csi.ControllerExpandVolumeRequest
}

func (p *plugin) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: "test.csi.example.com", VendorVersion: "1"}, nil
}

func (p *plugin) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(p.ready)}, p.probeErr
}

func (p *plugin) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{{
		Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: csi.ControllerServiceCapability_RPC_EXPAND_VOLUME}}}}}, nil
}

func (p *plugin) ControllerExpandVolume(_ context.Context, r *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expands = append(p.expands, r)
	if p.expandErr != nil {
		return nil, p.expandErr
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: r.GetCapacityRange().GetRequiredBytes(), NodeExpansionRequired: p.nodeExpand}, nil
}

// serve starts p on a unix socket and returns a connection to it.
func serve(t *testing.T, p *plugin) *grpc.ClientConn {
	t.Helper()
	sock := filepath.Join(shortDir(t), "csi.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	csi.RegisterIdentityServer(gs, p)
	csi.RegisterControllerServer(gs, p)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// shortDir is a temporary directory with a path short enough for a unix
// socket (t.TempDir's can exceed 108 bytes).
func shortDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "sc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestDriverName(t *testing.T) {
	t.Parallel()
	conn := serve(t, &plugin{})
	name, err := DriverName(context.Background(), conn)
	if err != nil || name != "test.csi.example.com" {
		t.Fatalf("DriverName = %q, %v", name, err)
	}
}

func TestLiveness(t *testing.T) {
	t.Parallel()
	p := &plugin{ready: true}
	srv := httptest.NewServer(&Liveness{Conn: serve(t, p)})
	t.Cleanup(srv.Close)
	get := func() (int, string) {
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(); code != 200 {
		t.Fatalf("ready plugin: %d %s", code, body)
	}
	p.mu.Lock()
	p.ready = false
	p.mu.Unlock()
	if code, body := get(); code != 500 || body == "" {
		t.Fatalf("not ready plugin: %d %q", code, body)
	}
	p.mu.Lock()
	p.ready, p.probeErr = true, status.Error(codes.FailedPrecondition, "target gone")
	p.mu.Unlock()
	if code, body := get(); code != 500 || !contains(body, "target gone") {
		t.Fatalf("failing probe: %d %q", code, body)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestRegistrar(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	r := &Registrar{Driver: "test.csi.example.com", Endpoint: "/var/lib/kubelet/plugins/test/csi.sock", Dir: dir, Log: quietLog()}
	// A socket left by an earlier container is replaced.
	if err := os.WriteFile(r.SocketPath(), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	var conn *grpc.ClientConn
	deadline := time.Now().Add(5 * time.Second)
	var info *registerapi.PluginInfo
	for {
		var err error
		conn, err = grpc.NewClient("unix://"+r.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			info, err = registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
			cancel()
			if err == nil {
				break
			}
			conn.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the kubelet cannot reach the registrar: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer conn.Close()
	if info.Type != registerapi.CSIPlugin || info.Name != r.Driver || info.Endpoint != r.Endpoint || len(info.SupportedVersions) == 0 {
		t.Fatalf("GetInfo = %+v", info)
	}
	client := registerapi.NewRegistrationClient(conn)
	if _, err := client.NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("registrar stopped after a successful registration: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := client.NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: false, Error: "version mismatch"}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !contains(err.Error(), "version mismatch") {
			t.Fatalf("Run = %v, want the kubelet's refusal", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("registrar kept running after the kubelet refused it")
	}
	if _, err := os.Stat(r.SocketPath()); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
}

func resizeFixture(t *testing.T, p *plugin) (*Resizer, *fake.Clientset) {
	fs := corev1.PersistentVolumeFilesystem
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:  &fs,
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "test.csi.example.com", VolumeHandle: "store/pool/pv-1", FSType: "xfs"}},
		},
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "app", UID: "u1"},
		Spec: corev1.PersistentVolumeClaimSpec{
			VolumeName: "pv-1",
			Resources:  corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
		},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}
	other := pv.DeepCopy()
	other.Name, other.Spec.CSI.Driver = "pv-2", "other.example.com"
	otherClaim := pvc.DeepCopy()
	otherClaim.Name, otherClaim.UID, otherClaim.Spec.VolumeName = "foreign", "u2", "pv-2"
	cs := fake.NewSimpleClientset(pv, pvc, other, otherClaim)
	r := &Resizer{Client: cs, Conn: serve(t, p), Driver: "test.csi.example.com", Events: record.NewFakeRecorder(20), Log: quietLog()}
	// Run's first step, without its loop.
	r.controllerExpand = true
	return r, cs
}

func claim(t *testing.T, cs *fake.Clientset, name string) *corev1.PersistentVolumeClaim {
	c, err := cs.CoreV1().PersistentVolumeClaims("app").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func pvSize(t *testing.T, cs *fake.Clientset, name string) string {
	pv, err := cs.CoreV1().PersistentVolumes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q := pv.Spec.Capacity[corev1.ResourceStorage]
	return q.String()
}

func hasCondition(c *corev1.PersistentVolumeClaim, typ corev1.PersistentVolumeClaimConditionType) bool {
	for _, x := range c.Status.Conditions {
		if x.Type == typ && x.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func TestResizerLeavesTheNodeStepToTheKubelet(t *testing.T) {
	t.Parallel()
	p := &plugin{nodeExpand: true}
	r, cs := resizeFixture(t, p)
	r.Sync(context.Background())
	if len(p.expands) != 1 {
		t.Fatalf("ControllerExpandVolume called %d times, want once (only for this driver's claim)", len(p.expands))
	}
	req := p.expands[0]
	if req.VolumeId != "store/pool/pv-1" || req.CapacityRange.RequiredBytes != 2<<30 || req.VolumeCapability.GetMount().GetFsType() != "xfs" ||
		req.VolumeCapability.GetAccessMode().GetMode() != csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER {
		t.Fatalf("request = %v", req)
	}
	if got := pvSize(t, cs, "pv-1"); got != "2Gi" {
		t.Fatalf("PV capacity %s, want 2Gi", got)
	}
	c := claim(t, cs, "data")
	if c.Status.AllocatedResourceStatuses[corev1.ResourceStorage] != corev1.PersistentVolumeClaimNodeResizePending || !hasCondition(c, corev1.PersistentVolumeClaimFileSystemResizePending) {
		t.Fatalf("claim status = %+v", c.Status)
	}
	if q := c.Status.Capacity[corev1.ResourceStorage]; q.String() != "1Gi" {
		t.Fatalf("claim capacity %s before the node step, want 1Gi", q.String())
	}
	if got := pvSize(t, cs, "pv-2"); got != "1Gi" {
		t.Fatalf("another driver's PV was resized to %s", got)
	}
	// Nothing more to do for the controller: a second pass calls nothing.
	r.Sync(context.Background())
	if len(p.expands) != 1 {
		t.Fatalf("a second pass expanded again")
	}
}

func TestResizerFinishesWithoutNodeStep(t *testing.T) {
	t.Parallel()
	r, cs := resizeFixture(t, &plugin{nodeExpand: false})
	r.Sync(context.Background())
	c := claim(t, cs, "data")
	if q := c.Status.Capacity[corev1.ResourceStorage]; q.String() != "2Gi" || len(c.Status.Conditions) != 0 || c.Status.AllocatedResourceStatuses != nil {
		t.Fatalf("claim status = %+v", c.Status)
	}
}

func TestResizerReportsAnInfeasibleRequest(t *testing.T) {
	t.Parallel()
	r, cs := resizeFixture(t, &plugin{expandErr: status.Error(codes.OutOfRange, "pool too small")})
	r.Sync(context.Background())
	c := claim(t, cs, "data")
	if c.Status.AllocatedResourceStatuses[corev1.ResourceStorage] != corev1.PersistentVolumeClaimControllerResizeInfeasible || !hasCondition(c, corev1.PersistentVolumeClaimControllerResizeError) {
		t.Fatalf("claim status = %+v", c.Status)
	}
	if got := pvSize(t, cs, "pv-1"); got != "1Gi" {
		t.Fatalf("PV capacity %s after a failed expansion", got)
	}
	ev := <-r.Events.(*record.FakeRecorder).Events
	if !contains(ev, "Resizing") {
		t.Fatalf("first event %q", ev)
	}
	if ev = <-r.Events.(*record.FakeRecorder).Events; !contains(ev, "VolumeResizeFailed") || !contains(ev, "pool too small") {
		t.Fatalf("event %q", ev)
	}
}

func TestLeaseName(t *testing.T) {
	if got := LeaseName("external-resizer", "pillar-csi.pillarhq.io"); got != "external-resizer-pillar-csi-pillarhq-io" {
		t.Fatal(got)
	}
}
