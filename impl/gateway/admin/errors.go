package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// APIError is every refusal of the admin API: an HTTP status, one of the
// stable codes of docs/admin-api.md, a message and optional details. It is
// rendered in one place (render).
type APIError struct {
	Status  int
	Code    string
	Message string
	Details any
}

func (e *APIError) Error() string { return e.Code + ": " + e.Message }

func apiErr(status int, code, format string, a ...any) *APIError {
	return &APIError{Status: status, Code: code, Message: fmt.Sprintf(format, a...)}
}

// Codes and their statuses.
func invalid(format string, a ...any) *APIError {
	return apiErr(http.StatusBadRequest, "invalid_request", format, a...)
}

var errStorageUnavailable = &APIError{Status: http.StatusServiceUnavailable, Code: "storage_unavailable", Message: "the database cannot be reached; retry later"}

// notFoundCode names the not-found code per resource, as the seed does.
type resource string

const (
	resUpstream  resource = "upstream"
	resPrincipal resource = "principal"
	resKey       resource = "key"
	resChain     resource = "plugin_chain_entry"
)

func notFound(r resource, id string) *APIError {
	switch r {
	case resUpstream:
		return apiErr(http.StatusNotFound, "upstream_not_found", "no upstream with id %q", id)
	case resPrincipal:
		return apiErr(http.StatusNotFound, "unknown_principal", "no principal with id %q", id)
	case resKey:
		return apiErr(http.StatusNotFound, "key_not_found", "no key with id %q for this principal", id)
	default:
		return apiErr(http.StatusNotFound, "plugin_chain_entry_not_found", "no plugin chain entry with id %q", id)
	}
}

// fromStore maps storage errors onto API errors at the edge.
func fromStore(err error, r resource, id string) error {
	var re *store.ReferencedError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNotFound):
		return notFound(r, id)
	case errors.Is(err, store.ErrStaleRevision):
		return apiErr(http.StatusConflict, "stale_revision", "the %s changed since you read it; read the latest revision and re-decide", r)
	case errors.Is(err, store.ErrConflict):
		return apiErr(http.StatusConflict, "conflict", "a %s with that name already exists", r)
	case errors.As(err, &re):
		e := apiErr(http.StatusConflict, "referenced_by", "the %s is still referenced; remove the references first", r)
		e.Details = map[string]any{"references": re.References}
		return e
	case errors.Is(err, store.ErrUnavailable):
		return errStorageUnavailable
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

// render writes err as the admin error shape; unknown errors become 500
// internal and are logged (they are bugs or infrastructure faults).
func render(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var ae *APIError
	if !errors.As(err, &ae) {
		log.Error("admin request failed", "method", r.Method, "path", r.URL.Path, "error", err)
		ae = &APIError{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error"}
	} else if ae.Status >= 500 {
		log.Warn("admin request failed", "method", r.Method, "path", r.URL.Path, "code", ae.Code)
	}
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
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"encoding failed"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
