package mtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func writePair(t *testing.T, dir, cn string, stamp time.Time) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(stamp.UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	for name, data := range map[string][]byte{CertFile: certPEM, CAFile: certPEM, KeyFile: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, stamp, stamp); err != nil {
			t.Fatal(err)
		}
	}
}

func leafCN(t *testing.T, c *tls.Config) string {
	t.Helper()
	cert, err := x509.ParseCertificate(c.Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return cert.Subject.CommonName
}

// A renewed certificate (cert-manager rewrites the secret's files) is used
// for the next handshake without a restart; a half-written rotation keeps
// the last good pair.
func TestServerReloadsRotatedFiles(t *testing.T) {
	dir := t.TempDir()
	writePair(t, dir, "first", time.Now().Add(-time.Minute))
	cfg, err := Server(dir)
	if err != nil {
		t.Fatal(err)
	}
	c1, err := cfg.GetConfigForClient(nil)
	if err != nil || leafCN(t, c1) != "first" || c1.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatalf("first config: %v", err)
	}
	writePair(t, dir, "second", time.Now())
	c2, err := cfg.GetConfigForClient(nil)
	if err != nil || leafCN(t, c2) != "second" {
		t.Fatalf("after rotation: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, KeyFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	c3, err := cfg.GetConfigForClient(nil)
	if err != nil || leafCN(t, c3) != "second" {
		t.Fatalf("mid-rotation: %v", err)
	}
}

func TestMissingFilesAreRefusedAtStart(t *testing.T) {
	if _, err := Server(t.TempDir()); err == nil {
		t.Fatal("server config from an empty directory")
	}
	if _, err := Client(t.TempDir(), ""); err == nil {
		t.Fatal("client config from an empty directory")
	}
}
