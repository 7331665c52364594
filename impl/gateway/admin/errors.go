package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/tracing"
)

// APIError is every refusal of the admin API: an HTTP status, one of the
// stable codes of docs/admin-api.md, a message and optional details. It is
// rendered and logged in one place (render). Messages never carry secrets:
// they may be logged and are shown to whoever sent the request.
type APIError struct {
	Status  int
	Code    string
	Message string
	Details any
	// cause is the underlying failure of a 5xx, logged but never sent.
	cause error
}

func (e *APIError) Error() string { return e.Code + ": " + e.Message }

func (e *APIError) Unwrap() error { return e.cause }

// codeStatus is the registry of error codes and their HTTP statuses; the
// OpenAPI document's ErrorCode enum must list exactly these (openapi_test).
var codeStatus = map[string]int{
	"invalid_request":                       http.StatusBadRequest,
	"invalid_location":                      http.StatusBadRequest,
	"conflicting_api_key":                   http.StatusBadRequest,
	"api_key_env_not_allowed":               http.StatusBadRequest,
	"warmup_requires_oauth_credentials":     http.StatusBadRequest,
	"credential_required":                   http.StatusBadRequest,
	"conflicting_credential":                http.StatusBadRequest,
	"host_credentials_not_allowed":          http.StatusBadRequest,
	"invalid_service_account":               http.StatusBadRequest,
	"unsupported_cache_keepalive_llm_judge": http.StatusBadRequest,
	"unauthorized":                          http.StatusUnauthorized,
	"not_found":                             http.StatusNotFound,
	"upstream_not_found":                    http.StatusNotFound,
	"unknown_principal":                     http.StatusNotFound,
	"key_not_found":                         http.StatusNotFound,
	"unknown_registry_entry":                http.StatusNotFound,
	"method_not_allowed":                    http.StatusMethodNotAllowed,
	"conflict":                              http.StatusConflict,
	"stale_revision":                        http.StatusConflict,
	"referenced_by":                         http.StatusConflict,
	"references_changed":                    http.StatusConflict,
	"request_too_large":                     http.StatusRequestEntityTooLarge,
	"unsupported_media_type":                http.StatusUnsupportedMediaType,
	"precondition_required":                 http.StatusPreconditionRequired,
	"internal":                              http.StatusInternalServerError,
	// OAuth upstreams and limit-reset claims.
	"not_oauth_upstream":       http.StatusBadRequest,
	"invalid_oauth_state":      http.StatusBadRequest,
	"oauth_scope_insufficient": http.StatusBadRequest,
	"oauth_not_configured":     http.StatusServiceUnavailable,
	"oauth_exchange_failed":    http.StatusBadGateway,
	"coupon_unavailable":       http.StatusConflict,
	"account_mismatch":         http.StatusConflict,
	"claim_in_progress":        http.StatusConflict,
	"claim_rejected":           http.StatusConflict,
	"claim_outcome_unknown":    http.StatusBadGateway,
	"provider_unavailable":     http.StatusBadGateway,
	// Plugin registry and chains.
	"invalid_plugin":                 http.StatusBadRequest,
	"reference_fingerprint_required": http.StatusBadRequest,
	"plugins_not_configured":         http.StatusServiceUnavailable,
	"storage_unavailable":            http.StatusServiceUnavailable,
	// Spend: budgets and the usage report.
	"invalid_budget":     http.StatusBadRequest,
	"invalid_time_range": http.StatusBadRequest,
	"invalid_group_by":   http.StatusBadRequest,
	// Identity: roles, scoped tokens, the audit trail and sign-in.
	"forbidden":             http.StatusForbidden,
	"invalid_role":          http.StatusBadRequest,
	"admin_token_not_found": http.StatusNotFound,
	// Alert webhooks.
	"webhook_not_found":     http.StatusNotFound,
	"exchange_not_captured": http.StatusNotFound,
	"unknown_condition":     http.StatusBadRequest,
	"secret_required":       http.StatusBadRequest,
	"webhook_disabled":      http.StatusConflict,
	"alerts_not_configured": http.StatusServiceUnavailable,
}

// newErr builds an APIError; its status comes from codeStatus so a code
// always travels with the same status.
func newErr(code, format string, a ...any) *APIError {
	status, ok := codeStatus[code]
	if !ok {
		panic("admin: unregistered error code " + code)
	}
	return &APIError{Status: status, Code: code, Message: fmt.Sprintf(format, a...)}
}

func invalid(format string, a ...any) *APIError { return newErr("invalid_request", format, a...) }

func storageUnavailable(cause error) *APIError {
	e := newErr("storage_unavailable", "the database cannot be reached; retry later")
	e.cause = cause
	return e
}

// resource names what a handler addresses, for the per-resource codes.
type resource string

const (
	resUpstream   resource = "upstream"
	resPrincipal  resource = "principal"
	resKey        resource = "key"
	resAdminToken resource = "admin token"
	resWebhook    resource = "webhook"
)

func notFound(r resource, id string) *APIError {
	switch r {
	case resUpstream:
		return newErr("upstream_not_found", "no upstream with id %q", id)
	case resKey:
		return newErr("key_not_found", "no key with id %q for this principal", id)
	case resAdminToken:
		return newErr("admin_token_not_found", "no admin token with id %q", id)
	default:
		return newErr("unknown_principal", "no principal with id %q", id)
	}
}

// fromStore maps storage errors onto API errors at the edge; anything it
// does not recognise stays as it is and is rendered as 500 internal.
func fromStore(err error, r resource, id string) error {
	var re *store.ReferencedError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrUnavailable):
		return storageUnavailable(err)
	case errors.Is(err, store.ErrNotFound):
		return notFound(r, id)
	case errors.Is(err, store.ErrStaleRevision):
		return newErr("stale_revision", "the %s changed since you read it; read the latest revision and re-decide", r)
	case errors.Is(err, store.ErrCredentialRequired):
		return newErr("credential_required", "the change points the %s's credential at another origin (base_url or oauth_token_url: scheme, host or port): "+
			"give the key again in the same request (api_key_value or api_key_env), or for a vendor_oauth upstream revoke its OAuth credential first "+
			"(POST /admin/v1/upstreams/{id}/oauth/revoke) and run the flow again after the change", r)
	case errors.Is(err, store.ErrConflict):
		return newErr("conflict", "a %s with that name already exists", r)
	case errors.As(err, &re):
		e := newErr("referenced_by", "the %s is still referenced; remove the references first", r)
		refs := re.References
		if refs == nil {
			refs = []store.Reference{}
		}
		e.Details = map[string]any{"references": refs}
		return e
	}
	return err
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Details any    `json:"details,omitempty"`
	} `json:"error"`
}

// render writes err in the admin error shape and logs it: refusals of the
// caller's request at debug, server-side failures at warn (known codes such
// as storage_unavailable) or error (anything unexpected, sent as 500
// internal without its text).
func render(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var ae *APIError
	ctx := r.Context()
	switch {
	case !errors.As(err, &ae):
		log.ErrorContext(ctx, "admin request failed", "method", r.Method, "path", r.URL.Path, "error", err)
		ae = newErr("internal", "internal error; the server log has the details")
	case ae.Status >= 500:
		attrs := []any{"method", r.Method, "path", r.URL.Path, "code", ae.Code}
		if ae.cause != nil {
			attrs = append(attrs, "error", ae.cause)
		}
		log.WarnContext(ctx, "admin request failed", attrs...)
	default:
		log.DebugContext(ctx, "admin request refused", "method", r.Method, "path", r.URL.Path,
			"status", ae.Status, "code", ae.Code, "message", ae.Message)
	}
	tracing.ErrorCode(ctx, ae.Code)
	var body errorBody
	body.Error.Code, body.Error.Message, body.Error.Details = ae.Code, ae.Message, ae.Details
	if ae.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="admin"`)
	}
	writeJSON(w, ae.Status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"encoding the response failed"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
