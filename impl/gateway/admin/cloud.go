package admin

import (
	"net/http"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/pillarhq/pillar/impl/gateway/cloud"
	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// CloudFields are a bedrock or vertex upstream's fields in the create,
// update and patch bodies (docs/cloud.md).
type CloudFields struct {
	Region  *string `json:"region"`
	Project *string `json:"project"`
	// ModelMap maps the model a client names to the upstream's id for it;
	// given, it replaces the map.
	ModelMap map[string]string `json:"model_map"`
	// Credentials: static AWS keys (bedrock), a service account key
	// (vertex), or the host's own credentials (admin role only, and only
	// when the server allows them).
	AWSAccessKeyID     *string `json:"aws_access_key_id"`
	AWSSecretAccessKey *string `json:"aws_secret_access_key"`
	AWSSessionToken    *string `json:"aws_session_token"`
	ServiceAccountJSON *string `json:"service_account_json"`
	HostCredentials    *bool   `json:"host_credentials"`
}

// Bounds of the cloud fields.
const (
	maxModelMap     = 200
	maxModelName    = 256
	maxServiceAcct  = 16 << 10
	googleTokenURI  = "https://oauth2.googleapis.com/token"
	cloudConfigHelp = "region, project and model_map apply to bedrock and vertex upstreams only"
)

var (
	regionName  = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,31}$`)
	projectName = regexp.MustCompile(`^[a-z][a-z0-9-]{4,28}[a-z0-9]$`)
)

func (f *CloudFields) configGiven() bool {
	return f.Region != nil || f.Project != nil || f.ModelMap != nil
}

func (f *CloudFields) credentialGiven() bool {
	return f.AWSAccessKeyID != nil || f.AWSSecretAccessKey != nil || f.AWSSessionToken != nil ||
		f.ServiceAccountJSON != nil || f.HostCredentials != nil
}

// cloudConfig is the configuration the fields leave: cur with what they
// give replaced, checked for kind. The Anthropic kinds take none.
func cloudConfig(kind string, f *CloudFields, cur store.CloudConfig) (store.CloudConfig, error) {
	if !store.IsCloud(kind) {
		if f.configGiven() {
			return cur, invalid(cloudConfigHelp)
		}
		return cur, nil
	}
	c := cur
	if f.Region != nil {
		c.Region = *f.Region
	}
	if f.Project != nil {
		c.Project = *f.Project
	}
	if f.ModelMap != nil {
		c.ModelMap = f.ModelMap
	}
	if !regionName.MatchString(c.Region) {
		return c, invalid("region: required for %s upstreams, a cloud region such as us-east-1 or europe-west1 (lower-case letters, digits and -)", kind)
	}
	switch {
	case kind == store.KindVertex && !projectName.MatchString(c.Project):
		return c, invalid("project: required for vertex upstreams, a Google Cloud project id (6 to 30 lower-case letters, digits and -)")
	case kind == store.KindBedrock && c.Project != "":
		return c, invalid("project: applies to vertex upstreams only")
	}
	if len(c.ModelMap) > maxModelMap {
		return c, invalid("model_map: at most %d entries", maxModelMap)
	}
	for from, to := range c.ModelMap {
		if !modelName(from) || !modelName(to) {
			return c, invalid("model_map: every model and id is 1 to %d characters without spaces or control characters", maxModelName)
		}
	}
	if len(c.ModelMap) == 0 {
		c.ModelMap = nil
	}
	return c, nil
}

func modelName(s string) bool {
	return s != "" && len(s) <= maxModelName && utf8.ValidString(s) &&
		!strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) })
}

// cloudBaseURL is a cloud upstream's base_url: the one given, else the
// platform's endpoint for its region.
func cloudBaseURL(kind, given, region string) string {
	switch {
	case given != "" || !store.IsCloud(kind):
		return given
	case kind == store.KindBedrock:
		return cloud.BedrockEndpoint(region)
	}
	return cloud.VertexEndpoint(region)
}

// sealedCloud is a cloud credential sealed for its upstream, with its
// kind and, for a service account, the token endpoint it names.
type sealedCloud struct {
	ciphertext []byte
	kind       string
	tokenURI   string
}

// cloudCredential seals the credential the fields give for a cloud
// upstream id at baseURL (bound to its origins, credential.AD); nil when
// none is given and none is required. No message repeats a value given.
func (a *api) cloudCredential(r *http.Request, id, kind, baseURL string, f *CloudFields, required bool) (*sealedCloud, error) {
	if !store.IsCloud(kind) {
		if f.credentialGiven() {
			return nil, invalid("aws_access_key_id, aws_secret_access_key, aws_session_token, service_account_json and host_credentials apply to bedrock and vertex upstreams only")
		}
		return nil, nil
	}
	aws := f.AWSAccessKeyID != nil || f.AWSSecretAccessKey != nil || f.AWSSessionToken != nil
	sa := f.ServiceAccountJSON != nil
	host := f.HostCredentials != nil && *f.HostCredentials
	switch {
	case aws && kind != store.KindBedrock:
		return nil, invalid("aws_access_key_id, aws_secret_access_key and aws_session_token apply to bedrock upstreams only")
	case sa && kind != store.KindVertex:
		return nil, invalid("service_account_json applies to vertex upstreams only")
	case (aws || sa) && host:
		return nil, newErr("conflicting_credential", "give either the credential itself or host_credentials, not both")
	}
	s := &sealedCloud{}
	var plain []byte
	switch {
	case host:
		// The host's credentials reach whatever base_url names: the same
		// stake as api_key_env, under the same guard.
		if caller, ok := IdentityFrom(r.Context()); ok && caller.Role != RoleAdmin {
			e := newErr("forbidden", "the %s role may not give host_credentials (the proxy host's own cloud credentials); give the upstream's own, or ask an admin", caller.Role)
			e.Details = map[string]any{"role": caller.Role}
			return nil, e
		}
		if !a.HostCloudCredentials {
			return nil, newErr("host_credentials_not_allowed", "host_credentials: the server does not allow upstreams to use its own cloud credentials (--allow-host-cloud-credentials)")
		}
		s.kind, plain = credential.Host, []byte(credential.Host)
		if kind == store.KindVertex {
			s.tokenURI = googleTokenURI
		}
	case aws:
		if f.AWSAccessKeyID == nil || f.AWSSecretAccessKey == nil || *f.AWSAccessKeyID == "" || *f.AWSSecretAccessKey == "" {
			return nil, invalid("aws_access_key_id and aws_secret_access_key: both required, non-empty")
		}
		k := cloud.StaticAWSCredentials{AccessKeyID: *f.AWSAccessKeyID, SecretAccessKey: *f.AWSSecretAccessKey}
		if f.AWSSessionToken != nil {
			k.SessionToken = *f.AWSSessionToken
		}
		if len(k.AccessKeyID)+len(k.SecretAccessKey)+len(k.SessionToken) > maxAPIKeyValue {
			return nil, invalid("aws_access_key_id, aws_secret_access_key and aws_session_token: at most %d bytes together", maxAPIKeyValue)
		}
		s.kind, plain = credential.AWSKeys, k.JSON()
	case sa:
		if len(*f.ServiceAccountJSON) > maxServiceAcct {
			return nil, newErr("invalid_service_account", "service_account_json: at most %d bytes", maxServiceAcct)
		}
		uri, err := cloud.ServiceAccountTokenURI([]byte(*f.ServiceAccountJSON))
		if err != nil {
			return nil, newErr("invalid_service_account", "service_account_json: %v", err)
		}
		if uri == "" {
			uri = googleTokenURI
		}
		// The proxy posts the account's signed assertions there: the
		// destination policy applies as to base_url.
		if err := a.location(r.Context(), "service_account_json.token_uri", uri); err != nil {
			return nil, err
		}
		s.kind, s.tokenURI, plain = credential.ServiceAccount, uri, []byte(*f.ServiceAccountJSON)
	default:
		if required {
			if kind == store.KindBedrock {
				return nil, invalid("bedrock upstreams need aws_access_key_id and aws_secret_access_key, or host_credentials")
			}
			return nil, invalid("vertex upstreams need service_account_json, or host_credentials")
		}
		return nil, nil
	}
	var err error
	s.ciphertext, err = a.Sealer.Seal(plain, credential.AD(id, kind, baseURL, s.tokenURI))
	return s, err
}

// cloudRefusesAPIKey: cloud upstreams take their own credential fields.
func cloudRefusesAPIKey(kind string, env, value *string) error {
	if store.IsCloud(kind) && (env != nil || value != nil) {
		return invalid("%s upstreams take aws_access_key_id and aws_secret_access_key, service_account_json or host_credentials; api_key_env and api_key_value are not accepted", kind)
	}
	return nil
}
