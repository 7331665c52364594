// Package agentclient keeps one gRPC connection per agent address for the
// controller, plaintext or mTLS (each dial verifies the agent certificate
// for the configured server name, or the dialled host when none is set).
package agentclient

import (
	"crypto/tls"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
	"github.com/pillarhq/pillar/impl/pillar/mtls"
)

// Pool dials agents and reuses connections.
type Pool struct {
	creds credentials.TransportCredentials

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// New returns a pool: mTLS with the certificates in certDir when set,
// plaintext otherwise.
func New(certDir, serverName string) (*Pool, error) {
	creds := insecure.NewCredentials()
	if certDir != "" {
		cfg, err := mtls.Client(certDir, serverName)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(cfg)
	}
	return &Pool{creds: creds, conns: map[string]*grpc.ClientConn{}}, nil
}

// NewWithTLS returns a pool using a TLS configuration as is (tests).
func NewWithTLS(cfg *tls.Config) *Pool {
	return &Pool{creds: credentials.NewTLS(cfg), conns: map[string]*grpc.ClientConn{}}
}

// Client returns the client of the agent at addr (host:port).
func (p *Pool) Client(addr string) (agentv1.AgentServiceClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return agentv1.NewAgentServiceClient(c), nil
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(p.creds))
	if err != nil {
		return nil, err
	}
	p.conns[addr] = c
	return agentv1.NewAgentServiceClient(c), nil
}

// Close closes every connection.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, c := range p.conns {
		c.Close()
		delete(p.conns, a)
	}
}
