package kubecontroller

import (
	"context"
	"log/slog"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/pillarhq/pillar/impl/pillar/crd"
	"github.com/pillarhq/pillar/impl/pillar/csicontroller"
)

// Options configure the manager.
type Options struct {
	Group                   string
	AgentPort               int
	Agents                  csicontroller.Agents
	Log                     *slog.Logger
	MetricsAddr, ProbeAddr  string
	LeaderElect             bool
	LeaderElectionNamespace string
	// WebhookPort 0 disables the webhooks.
	WebhookPort    int
	WebhookHost    string
	WebhookCertDir string
	// InProcessReplicas lets tests run several managers in one process
	// (controller names are otherwise unique per process).
	InProcessReplicas bool
	// Elected, when set, is called once this replica leads (tests).
	Elected func()
	// Serve, when set, runs on every replica (not only the leader): the
	// CSI controller service, given the store source and overrides.
	Serve func(ctx context.Context, src Source, ov Overrides) error
}

// NewManager builds the manager: reconcilers (leader only), webhooks and
// the CSI service (every replica), probes and metrics.
func NewManager(cfg *rest.Config, o Options) (manager.Manager, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	mo := ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:  o.ProbeAddr,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        "controller." + o.Group,
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		// A replica that stops hands the lease over at once instead of
		// letting it expire (rolling updates, the leader pod deleted).
		LeaderElectionReleaseOnCancel: true,
	}
	if o.InProcessReplicas {
		skip := true
		mo.Controller = config.Controller{SkipNameValidation: &skip}
	}
	if o.WebhookPort != 0 {
		mo.WebhookServer = webhook.NewServer(webhook.Options{Host: o.WebhookHost, Port: o.WebhookPort, CertDir: o.WebhookCertDir})
	}
	mgr, err := ctrl.NewManager(cfg, mo)
	if err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	c := &Config{Client: mgr.GetClient(), Group: o.Group, AgentPort: o.AgentPort, Agents: o.Agents, Log: o.Log}
	if err := ctrl.NewControllerManagedBy(mgr).Named("pillaragent").For(crd.New(o.Group, crd.KindAgent)).Complete(&AgentReconciler{c}); err != nil {
		return nil, err
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("pillarstore").For(crd.New(o.Group, crd.KindStore)).Complete(&StoreReconciler{c}); err != nil {
		return nil, err
	}
	if o.WebhookPort != 0 {
		mgr.GetWebhookServer().Register("/validate", &webhook.Admission{Handler: Validator{Group: o.Group}})
		mgr.GetWebhookServer().Register("/mutate", &webhook.Admission{Handler: Defaulter{Group: o.Group}})
		if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
			return nil, err
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if o.Elected != nil {
		go func() { <-mgr.Elected(); o.Elected() }()
	}
	if o.Serve != nil {
		if err := mgr.Add(everyReplica(func(ctx context.Context) error {
			return o.Serve(ctx, Source{c}, Overrides{c})
		})); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}

// everyReplica is a runnable that does not wait for leadership.
type everyReplica func(ctx context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }
func (f everyReplica) NeedLeaderElection() bool        { return false }

var _ admission.Handler = Validator{}
