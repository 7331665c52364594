package cloud

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"golang.org/x/oauth2"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Upstream is what a cloud transport is built from: a bedrock or vertex
// upstream of the snapshot, its credential opened.
type Upstream struct {
	ID, Kind, BaseURL string
	// CredentialKind is credential.AWSKeys, credential.ServiceAccount or
	// credential.Host; Credential the opened secret.
	CredentialKind, Credential string
	Config                     store.CloudConfig
}

// Pool keeps one credential source per upstream across snapshots, so AWS
// credentials and Vertex tokens are fetched once and renewed before they
// expire rather than on every configuration change; it builds a fresh one
// when the upstream's credential or endpoint changes.
type Pool struct {
	next    http.RoundTripper
	metrics *Metrics
	// ctx outlives requests: token sources keep it for their refreshes.
	ctx context.Context
	// clock is the one Vertex tokens are refreshed ahead by.
	clock clock.Clock

	mu      sync.Mutex
	sources map[string]*source
}

type source struct {
	key    [32]byte
	aws    aws.CredentialsProvider
	signer *v4.Signer
	tokens oauth2.TokenSource
}

// NewPool returns a Pool whose transports send through next, counted in
// m (nil: not counted), with clk the clock of token refreshes (nil: the
// real one).
func NewPool(next http.RoundTripper, m *Metrics, clk clock.Clock) *Pool {
	return &Pool{next: next, metrics: m, ctx: context.Background(), clock: clock.Or(clk), sources: map[string]*source{}}
}

// For is the transport of u: it maps models by u's model map and signs
// or authorizes with u's credential.
func (p *Pool) For(u Upstream) (http.RoundTripper, error) {
	src, err := p.source(u)
	if err != nil {
		p.metrics.observe(u.Kind, outcomeCredential)
		return nil, err
	}
	switch u.Kind {
	case store.KindBedrock:
		return &Bedrock{Endpoint: u.BaseURL, Region: u.Config.Region, Credentials: src.aws, Models: u.Config.ModelMap, Next: p.next, Metrics: p.metrics, Signer: src.signer}, nil
	case store.KindVertex:
		return &Vertex{Endpoint: u.BaseURL, Project: u.Config.Project, Region: u.Config.Region, Tokens: src.tokens,
			Models: u.Config.ModelMap, Next: p.next, Metrics: p.metrics}, nil
	}
	return nil, errors.New("cloud: not a cloud upstream kind: " + u.Kind)
}

// Retain drops the credential sources of the upstreams live does not
// name: a deleted upstream's signer, credentials and token cache would
// otherwise stay for the life of the process.
func (p *Pool) Retain(live func(id string) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id := range p.sources {
		if !live(id) {
			delete(p.sources, id)
		}
	}
}

// Len is the number of upstreams holding a credential source.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sources)
}

func (p *Pool) source(u Upstream) (*source, error) {
	key := sha256.Sum256([]byte(u.Kind + "\x00" + u.BaseURL + "\x00" + u.Config.Region + "\x00" + u.CredentialKind + "\x00" + u.Credential))
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.sources[u.ID]; ok && s.key == key {
		return s, nil
	}
	s := &source{key: key, signer: v4.NewSigner()}
	var err error
	switch {
	case u.Kind == store.KindBedrock && u.CredentialKind == credential.AWSKeys:
		var k StaticAWSCredentials
		if err = json.Unmarshal([]byte(u.Credential), &k); err == nil {
			s.aws = aws.NewCredentialsCache(k.Provider())
		}
	case u.Kind == store.KindBedrock && u.CredentialKind == credential.Host:
		var cfg aws.Config
		// The default chain: environment, shared files, web identity,
		// container and instance roles. Loading reads no secret yet.
		if cfg, err = awsconfig.LoadDefaultConfig(p.ctx, awsconfig.WithRegion(u.Config.Region)); err == nil {
			s.aws = cfg.Credentials
		}
	case u.Kind == store.KindVertex && u.CredentialKind == credential.ServiceAccount:
		s.tokens, err = VertexTokens(p.ctx, []byte(u.Credential), p.next, p.clock, p.metrics)
	case u.Kind == store.KindVertex && u.CredentialKind == credential.Host:
		s.tokens, err = VertexTokens(p.ctx, nil, p.next, p.clock, p.metrics)
	default:
		err = errors.New("cloud: a " + u.Kind + " upstream cannot use a credential of kind " + u.CredentialKind)
	}
	if err != nil {
		return nil, err
	}
	p.sources[u.ID] = s
	return s, nil
}
