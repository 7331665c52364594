package store

import (
	"context"
	"encoding/json"
	"sync"
	"time"
)

// AdminToken is a scoped credential of the admin API: a role, a name and an
// expiry. Only the SHA-256 of the token is stored; Prefix identifies it in
// listings.
type AdminToken struct {
	ID        string
	Name      string
	Role      string
	Prefix    string
	Hash      []byte
	CreatedAt time.Time
	ExpiresAt time.Time
	RevokedAt *time.Time
	// CreatedBy is the subject that issued the token.
	CreatedBy string
}

// IdentityStore holds the admin API's scoped tokens and the readable audit
// trail. Token changes are audited like configuration changes but do not
// bump the configuration generation: the proxy path never reads them.
type IdentityStore interface {
	// CreateAdminToken stores a token; ID and CreatedAt are filled in.
	CreateAdminToken(ctx context.Context, t AdminToken) (*AdminToken, error)
	// ListAdminTokens returns every token, revoked ones included, oldest first.
	ListAdminTokens(ctx context.Context) ([]AdminToken, error)
	// AdminTokenByHash returns the token with this hash, revoked or
	// expired ones included (the caller decides); ErrNotFound when none.
	AdminTokenByHash(ctx context.Context, hash []byte) (*AdminToken, error)
	// RevokeAdminToken marks the token revoked; revoking twice is not an
	// error and writes no second audit row.
	RevokeAdminToken(ctx context.Context, id string) (*AdminToken, error)

	// QueryAudit returns the audit entries matching q, newest first.
	QueryAudit(ctx context.Context, q AuditQuery) ([]AuditEntry, error)
	// AnnotateAudit attaches the resource's state before and after the
	// change to audit rows already written (ids from an AuditNote).
	AnnotateAudit(ctx context.Context, ids []string, before, after json.RawMessage) error
}

// AuditQuery filters and pages the audit trail. Empty fields match
// everything; After continues a page: entries strictly older than the
// entry (At, ID) it names.
type AuditQuery struct {
	Since, Until time.Time
	Actor        string
	ActorKind    string
	Action       string
	ResourceKind string
	ResourceID   string
	After        *AuditCursor
	Limit        int
}

// AuditCursor names the last entry of a page.
type AuditCursor struct {
	At time.Time
	ID string
}

// Actor is who makes the changes done with a context: the kind of
// credential ("break_glass", "token", "oidc", "cli", "system"), the
// subject, the issuer of an OIDC identity, the scoped token's name and
// the client's address.
type Actor struct {
	Kind, Subject, Issuer, TokenName, Remote string
}

type actorInfoKey struct{}

// WithActorInfo records a full actor for the changes done with ctx; its
// Subject is what ActorFrom returns.
func WithActorInfo(ctx context.Context, a Actor) context.Context {
	return context.WithValue(WithActor(ctx, a.Subject), actorInfoKey{}, a)
}

// ActorInfoFrom returns the actor of ctx. Without WithActorInfo, Subject
// is ActorFrom's and Kind is "system" (or "named" when a name was set).
func ActorInfoFrom(ctx context.Context) Actor {
	if a, ok := ctx.Value(actorInfoKey{}).(Actor); ok && ctx.Value(actorKey{}) == a.Subject {
		return a
	}
	s := ActorFrom(ctx)
	if s == "system" {
		return Actor{Kind: "system", Subject: s}
	}
	return Actor{Kind: "named", Subject: s}
}

// AuditNote collects the ids of the audit rows written with a context, so
// that the caller can annotate them once the change committed.
type AuditNote struct {
	mu  sync.Mutex
	ids []string
}

type auditNoteKey struct{}

// WithAuditNote makes the store report the audit rows it writes with ctx
// to n.
func WithAuditNote(ctx context.Context, n *AuditNote) context.Context {
	return context.WithValue(ctx, auditNoteKey{}, n)
}

// NoteAudit is called by stores for each audit row they write.
func NoteAudit(ctx context.Context, id string) {
	if n, ok := ctx.Value(auditNoteKey{}).(*AuditNote); ok {
		n.mu.Lock()
		n.ids = append(n.ids, id)
		n.mu.Unlock()
	}
}

// IDs returns the rows noted so far.
func (n *AuditNote) IDs() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.ids...)
}
