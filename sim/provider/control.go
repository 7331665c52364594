package provider

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"
)

// control serves the /_sim/ API tests use to inspect and steer the sim. It
// has no authentication: the binary listens on loopback only.
func (p *Provider) control(w http.ResponseWriter, r *http.Request) {
	if name, ok := strings.CutPrefix(r.URL.Path, "/_sim/accounts/"); ok && name != "" {
		switch r.Method {
		case http.MethodGet:
			writeJSON(w, p.Account(name))
		case http.MethodPost:
			var u AccountUpdate
			if err := decodeStrict(r.Body, &u); err != nil {
				controlError(w, http.StatusBadRequest, "bad account update: "+err.Error())
				return
			}
			writeJSON(w, p.SetAccount(name, u))
		default:
			controlError(w, http.StatusMethodNotAllowed, "use GET or POST")
		}
		return
	}
	switch r.Method + " " + r.URL.Path {
	case "GET /_sim/vertex/service-account":
		w.Header().Set("Content-Type", "application/json")
		w.Write(p.ServiceAccountJSON(vertexBase(r)))
	case "GET /_sim/accounts":
		writeJSON(w, p.Accounts())
	case "POST /_sim/oauth/revoke":
		var b struct {
			Account string `json:"account"`
		}
		if decodeStrict(r.Body, &b) != nil || b.Account == "" {
			controlError(w, http.StatusBadRequest, `want {"account":"name"}`)
			return
		}
		p.RevokeOAuth(b.Account)
		w.WriteHeader(http.StatusNoContent)
	case "GET /_sim/requests":
		writeJSON(w, p.Requests())
	case "DELETE /_sim/requests":
		p.ClearRequests()
		w.WriteHeader(http.StatusNoContent)
	case "GET /_sim/clock":
		writeClock(w, p.Now())
	case "POST /_sim/clock":
		var b struct {
			NowUnix     *int64   `json:"now_unix"`
			AdvanceSecs *float64 `json:"advance_secs"`
		}
		if err := decodeStrict(r.Body, &b); err != nil || (b.NowUnix == nil) == (b.AdvanceSecs == nil) {
			controlError(w, http.StatusBadRequest, `give exactly one of {"now_unix":N} or {"advance_secs":N}`)
			return
		}
		if b.NowUnix != nil {
			p.SetNow(time.Unix(*b.NowUnix, 0))
		} else {
			p.Advance(time.Duration(*b.AdvanceSecs * float64(time.Second)))
		}
		writeClock(w, p.Now())
	case "POST /_sim/faults":
		p.postFaults(w, r)
	case "GET /_sim/faults":
		writeJSON(w, p.Faults())
	case "DELETE /_sim/faults":
		p.ClearFaults()
		w.WriteHeader(http.StatusNoContent)
	case "POST /_sim/catalog":
		var b struct {
			Version int `json:"version"`
		}
		if decodeStrict(r.Body, &b) != nil || b.Version < 1 {
			controlError(w, http.StatusBadRequest, `want {"version":N} with N >= 1`)
			return
		}
		p.SetCatalogVersion(b.Version)
		w.WriteHeader(http.StatusNoContent)
	case "POST /_sim/reset":
		p.Reset()
		w.WriteHeader(http.StatusNoContent)
	default:
		controlError(w, http.StatusNotFound, "unknown control endpoint "+r.Method+" "+r.URL.Path)
	}
}

// postFaults queues one fault object or a list of them; a list is queued
// all or nothing.
func (p *Provider) postFaults(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		controlError(w, http.StatusBadRequest, err.Error())
		return
	}
	var fs []Fault
	if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '[' {
		err = decodeStrict(bytes.NewReader(t), &fs)
	} else {
		fs = make([]Fault, 1)
		err = decodeStrict(bytes.NewReader(t), &fs[0])
	}
	if err != nil {
		controlError(w, http.StatusBadRequest, "bad fault: "+err.Error())
		return
	}
	if err := p.AddFault(fs...); err != nil {
		controlError(w, http.StatusBadRequest, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// decodeStrict rejects unknown fields, so a misspelt key fails loudly
// instead of injecting nothing.
func decodeStrict(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func writeClock(w http.ResponseWriter, now time.Time) {
	writeJSON(w, map[string]any{"now_unix": now.Unix(), "now": now.UTC().Format(time.RFC3339Nano)})
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		controlError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// controlError is the control API's own error shape, distinct from the
// provider's so a test cannot mistake one for the other.
func controlError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(map[string]string{"error": msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}
