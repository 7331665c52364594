package storetest

import (
	"maps"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func exerciseCloud(t *testing.T, open Opener) {
	t.Run("CloudUpstream", func(t *testing.T) { run(t, open, testCloudUpstream) })
	t.Run("EventUpstreamModel", func(t *testing.T) { run(t, open, testEventUpstreamModel) })
}

// A cloud upstream's region, project and model map are stored at create,
// replaced by update and patch, and read back by get, list and the
// snapshot's config read; an Anthropic upstream has none.
func testCloudUpstream(t *testing.T, open Opener) {
	b := setup(t, open)
	plain := must(b.st.CreateUpstream(b.ctx, apiKeySpec("anthropic")))
	if plain.Cloud.Region != "" || plain.Cloud.ModelMap != nil {
		t.Fatalf("an Anthropic upstream has cloud config %+v", plain.Cloud)
	}
	spec := store.UpstreamSpec{Name: "bedrock", Kind: store.KindBedrock, BaseURL: "https://bedrock-runtime.eu-west-1.amazonaws.com",
		Enabled: true, Credential: []byte("ct-aws"), CredentialKind: "aws_keys",
		Cloud: store.CloudConfig{Region: "eu-west-1", ModelMap: map[string]string{"claude-sonnet-4-5": "eu.anthropic.claude-sonnet-4-5-20250929-v1:0"}}}
	u := must(b.st.CreateUpstream(b.ctx, spec))
	if u.Kind != store.KindBedrock || u.Cloud.Region != "eu-west-1" || !maps.Equal(u.Cloud.ModelMap, spec.Cloud.ModelMap) {
		t.Fatalf("created %+v", u)
	}
	spec.Cloud.ModelMap["claude-haiku-4-5"] = "anthropic.claude-haiku-4-5-20251001-v1:0"
	spec.Cloud.Region = "us-east-1"
	spec.Credential = nil
	u = must(b.st.UpdateUpstream(b.ctx, u.ID, u.SpecRevision, spec))
	if u.Cloud.Region != "us-east-1" || len(u.Cloud.ModelMap) != 2 {
		t.Fatalf("updated %+v", u.Cloud)
	}
	v := store.CloudConfig{Region: "europe-west1", Project: "acme", ModelMap: map[string]string{"claude-sonnet-4-5": "claude-sonnet-4-5@20250929"}}
	u = must(b.st.PatchUpstream(b.ctx, u.ID, u.SpecRevision, store.UpstreamPatch{Cloud: &v}))
	got := must(b.st.GetUpstream(b.ctx, u.ID))
	if got.Cloud.Project != "acme" || got.Cloud.Region != "europe-west1" || !maps.Equal(got.Cloud.ModelMap, v.ModelMap) {
		t.Fatalf("patched %+v", got.Cloud)
	}
	cfg := must(b.st.LoadConfig(b.ctx))
	for _, x := range cfg.Upstreams {
		if x.ID == u.ID && x.Cloud.Project != "acme" {
			t.Fatalf("config read %+v", x.Cloud)
		}
	}
}

// The upstream's model id is kept with the request event beside the
// client's model.
func testEventUpstreamModel(t *testing.T, open Opener) {
	b := setup(t, open)
	at := b.clk.Now()
	evs := []store.RequestEvent{
		{At: at, PrincipalID: "pr_1", KeyID: "key_1", Model: "claude-sonnet-4-5", UpstreamModel: "anthropic.claude-sonnet-4-5-20250929-v1:0", Status: 200},
		{At: at, PrincipalID: "pr_1", KeyID: "key_1", Model: "claude-opus-4-1", Status: 200},
	}
	if err := b.st.InsertRequestEvents(b.ctx, evs); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range must(b.st.ListRequestEvents(b.ctx, at, 10)) {
		got[e.Model] = e.UpstreamModel
	}
	if got["claude-sonnet-4-5"] != "anthropic.claude-sonnet-4-5-20250929-v1:0" || got["claude-opus-4-1"] != "" {
		t.Fatalf("upstream models %v", got)
	}
}
