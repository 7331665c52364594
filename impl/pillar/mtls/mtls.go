// Package mtls builds the TLS configurations of the controller-to-agent
// gRPC link from a certificate directory holding tls.crt, tls.key and
// ca.crt (a Kubernetes TLS secret with its CA, as cert-manager writes it
// or an operator provides it). Both sides require and verify the other's
// certificate against ca.crt. The files are re-read when they change, so
// a renewed certificate is used without a restart.
package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// File names inside the certificate directory.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
	CAFile   = "ca.crt"
)

// source loads the directory's files and reloads them when a modification
// time changes.
type source struct {
	dir string

	mu    sync.Mutex
	stamp [3]time.Time
	cert  *tls.Certificate
	pool  *x509.CertPool
}

func newSource(dir string) (*source, error) {
	s := &source{dir: dir}
	if _, _, err := s.get(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *source) get() (*tls.Certificate, *x509.CertPool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var stamp [3]time.Time
	for i, f := range []string{CertFile, KeyFile, CAFile} {
		st, err := os.Stat(filepath.Join(s.dir, f))
		if err != nil {
			if s.cert != nil {
				return s.cert, s.pool, nil // mid-rotation: keep the last good pair
			}
			return nil, nil, fmt.Errorf("mtls: %w", err)
		}
		stamp[i] = st.ModTime()
	}
	if s.cert != nil && stamp == s.stamp {
		return s.cert, s.pool, nil
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(s.dir, CertFile), filepath.Join(s.dir, KeyFile))
	if err != nil {
		if s.cert != nil {
			return s.cert, s.pool, nil
		}
		return nil, nil, fmt.Errorf("mtls: key pair in %s: %w", s.dir, err)
	}
	caPEM, err := os.ReadFile(filepath.Join(s.dir, CAFile))
	if err != nil {
		return nil, nil, fmt.Errorf("mtls: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		if s.cert != nil {
			return s.cert, s.pool, nil
		}
		return nil, nil, fmt.Errorf("mtls: %s holds no PEM certificate", filepath.Join(s.dir, CAFile))
	}
	s.cert, s.pool, s.stamp = &cert, pool, stamp
	return s.cert, s.pool, nil
}

// Server is the agent's side: present tls.crt, require a client
// certificate signed by ca.crt.
func Server(dir string) (*tls.Config, error) {
	src, err := newSource(dir)
	if err != nil {
		return nil, err
	}
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		cert, pool, err := src.get()
		if err != nil {
			return nil, err
		}
		return &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{*cert},
			ClientCAs:    pool,
			ClientAuth:   tls.RequireAndVerifyClientCert,
			NextProtos:   []string{"h2"},
		}, nil
	}
	return base, nil
}

// Client is the controller's side: present tls.crt and verify the agent's
// certificate against ca.crt for serverName. An empty serverName checks
// the host the controller dials (the agent's node IP), as the chart's
// mtls.serverName documents.
func Client(dir, serverName string) (*tls.Config, error) {
	src, err := newSource(dir)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: serverName,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _, err := src.get()
			return cert, err
		},
		// Verification against a pool that may be rotated: the standard
		// checks, done here with the current ca.crt.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection below
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, pool, err := src.get()
			if err != nil {
				return err
			}
			if len(cs.PeerCertificates) == 0 {
				return errors.New("mtls: agent presented no certificate")
			}
			opts := x509.VerifyOptions{Roots: pool, DNSName: cs.ServerName, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
				return fmt.Errorf("mtls: agent certificate: %w", err)
			}
			return nil
		},
	}
	return cfg, nil
}
