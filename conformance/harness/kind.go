package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/storage/driver"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
)

// KindCluster is a kind cluster made for a suite from the offline node
// image (scripts/kind/node-image.sh), with clients for it.
type KindCluster struct {
	Name       string
	Kubeconfig string
	Rest       *rest.Config
	Client     kubernetes.Interface
	Dynamic    dynamic.Interface

	provider *cluster.Provider
}

// kindConfig is what the offline image needs (docs/kind.md): it has no
// kindnetd but a static CNI configuration, and this VM's kubelet runs on
// cgroup v1, which v1.37 refuses unless told.
const kindConfig = `kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  disableDefaultCNI: true
kubeadmConfigPatches:
  - |
    kind: KubeletConfiguration
    failCgroupV1: false
nodes:
  - role: control-plane
`

// CreateKind creates the cluster name from nodeImage (deleting a leftover
// of the same name first) and waits for its node to be Ready. kind runs
// docker through scripts/kind/docker, which adapts `--privileged` to this
// machine (docs/kind.md).
func CreateKind(name, nodeImage string) (*KindCluster, error) {
	wrapper := filepath.Join(ModuleRoot(), "scripts", "kind")
	if !strings.HasPrefix(os.Getenv("PATH"), wrapper+":") {
		os.Setenv("PATH", wrapper+":"+os.Getenv("PATH"))
	}
	p := cluster.NewProvider(cluster.ProviderWithDocker())
	if existing, _ := p.List(); contains(existing, name) {
		_ = p.Delete(name, "")
	}
	dir, err := os.MkdirTemp("", "kind-"+name)
	if err != nil {
		return nil, err
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := p.Create(name,
		cluster.CreateWithNodeImage(nodeImage),
		cluster.CreateWithRawConfig([]byte(kindConfig)),
		cluster.CreateWithKubeconfigPath(kc),
		cluster.CreateWithWaitForReady(3*time.Minute),
		cluster.CreateWithDisplayUsage(false),
		cluster.CreateWithDisplaySalutation(false),
	); err != nil {
		return nil, fmt.Errorf("kind create cluster %s: %w", name, err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 50, 100
	c := &KindCluster{Name: name, Kubeconfig: kc, Rest: cfg, provider: p}
	if c.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	return c, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Nodes lists the cluster's node containers.
func (c *KindCluster) Nodes() ([]nodes.Node, error) { return c.provider.ListInternalNodes(c.Name) }

// Node returns the (only) node container.
func (c *KindCluster) Node() (nodes.Node, error) {
	ns, err := c.Nodes()
	if err != nil {
		return nil, err
	}
	if len(ns) == 0 {
		return nil, fmt.Errorf("cluster %s has no nodes", c.Name)
	}
	return ns[0], nil
}

// NodeIP is the node's address on the docker network, which this machine
// reaches directly (NodePorts, the agent's host port).
func (c *KindCluster) NodeIP() (string, error) {
	n, err := c.Node()
	if err != nil {
		return "", err
	}
	v4, _, err := n.IP()
	return v4, err
}

// NodeExec runs a command in the node container and returns its output.
func (c *KindCluster) NodeExec(args ...string) (string, error) {
	n, err := c.Node()
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	cmd := n.Command(args[0], args[1:]...)
	cmd.SetStdout(&out)
	cmd.SetStderr(&out)
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// LoadImages copies local docker images into every node's containerd, as
// `kind load docker-image` does.
func (c *KindCluster) LoadImages(refs ...string) error {
	ns, err := c.Nodes()
	if err != nil {
		return err
	}
	tar, err := os.CreateTemp("", "kind-images-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(tar.Name())
	tar.Close()
	if out, err := exec.Command("docker", append([]string{"save", "-o", tar.Name()}, refs...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("docker save %v: %w: %s", refs, err, out)
	}
	for _, n := range ns {
		f, err := os.Open(tar.Name())
		if err != nil {
			return err
		}
		err = nodeutils.LoadImageArchive(n, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("loading images into %s: %w", n, err)
		}
	}
	return nil
}

// ExportLogs writes kind's log bundle (kubelet, containerd, every pod's
// logs) under dir.
func (c *KindCluster) ExportLogs(dir string) error { return c.provider.CollectLogs(c.Name, dir) }

// Delete removes the cluster.
func (c *KindCluster) Delete() error {
	err := c.provider.Delete(c.Name, c.Kubeconfig)
	os.RemoveAll(filepath.Dir(c.Kubeconfig))
	return err
}

// Helm installs chartDir as release in namespace, or upgrades it when it
// exists (`helm upgrade --install --wait`), with values.
func (c *KindCluster) Helm(ctx context.Context, release, namespace, chartDir string, values map[string]any, timeout time.Duration) error {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return err
	}
	cfg := new(action.Configuration)
	getter := kube.GetConfig(c.Kubeconfig, "", namespace)
	if err := cfg.Init(getter, namespace, "secret", func(string, ...any) {}); err != nil {
		return err
	}
	hist := action.NewHistory(cfg)
	hist.Max = 1
	if _, err := hist.Run(release); errors.Is(err, driver.ErrReleaseNotFound) {
		in := action.NewInstall(cfg)
		in.ReleaseName, in.Namespace, in.CreateNamespace = release, namespace, true
		in.Wait, in.Timeout = true, timeout
		_, err := in.RunWithContext(ctx, ch, values)
		return err
	} else if err != nil {
		return err
	}
	up := action.NewUpgrade(cfg)
	up.Namespace, up.Wait, up.Timeout = namespace, true, timeout
	_, err = up.RunWithContext(ctx, release, ch, values)
	return err
}
