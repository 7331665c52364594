package cloud

import (
	"net/http"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// The pool keeps one signer per upstream while its credential stays, makes
// a new one when the credential changes, and drops the upstreams Retain
// does not name.
func TestPoolSignerPerCredential(t *testing.T) {
	t.Parallel()
	p := NewPool(http.DefaultTransport, nil, nil)
	up := func(id, key string) Upstream {
		return Upstream{ID: id, Kind: store.KindBedrock, BaseURL: "http://b.invalid", CredentialKind: credential.AWSKeys,
			Credential: string(StaticAWSCredentials{AccessKeyID: key, SecretAccessKey: "s"}.JSON()), Config: store.CloudConfig{Region: "us-east-1"}}
	}
	signer := func(u Upstream) any {
		t.Helper()
		rt, err := p.For(u)
		if err != nil {
			t.Fatal(err)
		}
		return rt.(*Bedrock).Signer
	}
	first := signer(up("a", "AKIA1"))
	if signer(up("a", "AKIA1")) != first {
		t.Fatal("the same credential got a new signer")
	}
	changed := signer(up("a", "AKIA2"))
	if changed == first {
		t.Fatal("a changed credential kept the old signer")
	}
	signer(up("b", "AKIA3"))
	if p.Len() != 2 {
		t.Fatalf("pool %d", p.Len())
	}
	p.Retain(func(id string) bool { return id == "b" })
	if p.Len() != 1 {
		t.Fatalf("after a is gone: pool %d", p.Len())
	}
}
