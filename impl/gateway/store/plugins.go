package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sort"
	"time"
)

// ErrReferencesChanged: a cascade delete named a reference fingerprint that
// no longer matches the entry's references.
var ErrReferencesChanged = errors.New("references changed")

// Plugin slots.
const (
	// SlotWarmupDialect shapes an upstream's warm-up request.
	SlotWarmupDialect = "warmup_dialect"
)

// PluginStore is the WASM plugin registry and the chain edits.
type PluginStore interface {
	// CreateRegistryEntry stores an uploaded module; ErrConflict when the
	// name and version are taken.
	CreateRegistryEntry(ctx context.Context, e RegistryEntry, module []byte) (*RegistryEntry, error)
	GetRegistryEntry(ctx context.Context, id string) (*RegistryEntry, error)
	ListRegistryEntries(ctx context.Context) ([]RegistryEntry, error)
	// RegistryModule returns an entry's module bytes.
	RegistryModule(ctx context.Context, id string) ([]byte, error)
	// PatchRegistryEntry changes name and version (nil keeps).
	PatchRegistryEntry(ctx context.Context, id string, expect int64, name, version *string) (*RegistryEntry, error)
	// RegistryReferences lists the chain entries and upstream warm-up
	// dialect bindings that reference the entry.
	RegistryReferences(ctx context.Context, id string) ([]Reference, error)
	// DeleteRegistryEntry deletes the entry. Without cascade it fails with
	// *ReferencedError while referenced. With cascade it removes the
	// references too, in the same transaction, only when fingerprint is
	// the current ReferenceFingerprint (else ErrReferencesChanged), and
	// returns what it removed.
	DeleteRegistryEntry(ctx context.Context, id string, expect int64, cascade bool, fingerprint string) ([]Reference, error)

	// InsertChainEntry binds a registry entry into a principal's chain at
	// position (nil: last), shifting later entries. ErrConflict when the
	// entry is already bound in that slot; ErrNotFound for an unknown
	// principal; *SlotError when the registry entry is unknown or lacks the slot.
	InsertChainEntry(ctx context.Context, principalID string, e ChainEntry, position *int64) (*ChainEntry, error)
	// ReorderChain sets the order of a principal's whole slot chain; each
	// listed revision must be current (ErrStaleRevision).
	ReorderChain(ctx context.Context, principalID, slot string, order []ChainRef) ([]ChainEntry, error)
	// RebalanceChain renumbers a principal's chain positions 0, 10, 20 ….
	RebalanceChain(ctx context.Context, principalID string) ([]ChainEntry, error)
	GetChainEntry(ctx context.Context, id string) (*ChainEntry, error)
	// DeleteChainEntry removes one entry.
	DeleteChainEntry(ctx context.Context, id string, expect int64) error
}

// RegistryEntry is one uploaded WASM module.
type RegistryEntry struct {
	ID        string
	Name      string
	Version   *string
	Digest    string // hex SHA-256 of the module
	Slots     []string
	SizeBytes int64
	Revision  int64
	// Refcount counts chain bindings plus upstream warm-up dialect bindings.
	Refcount  int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ChainRef names a chain entry at a revision.
type ChainRef struct {
	ID       string `json:"id"`
	Revision int64  `json:"revision"`
}

// SlotError refuses a binding to a registry entry that is unknown or does
// not support the slot.
type SlotError struct {
	RegistryID, Slot string
	Unknown          bool
}

func (e *SlotError) Error() string {
	if e.Unknown {
		return "unknown registry entry " + e.RegistryID
	}
	return "registry entry " + e.RegistryID + " does not support slot " + e.Slot
}

// ReferenceFingerprint identifies a reference list: it changes whenever a
// reference is added or removed.
func ReferenceFingerprint(refs []Reference) string {
	return fingerprint(refs)
}

func fingerprint(refs []Reference) string {
	keys := make([]string, 0, len(refs))
	for _, r := range refs {
		keys = append(keys, r.Kind+"\x00"+r.ID+"\x00"+r.Owner)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		h.Write([]byte(k))
		h.Write([]byte{'\n'})
	}
	return "rf_" + hex.EncodeToString(h.Sum(nil))[:32]
}

// OrderError refuses a reorder that does not list the chain exactly.
type OrderError struct{ Message string }

func (e *OrderError) Error() string { return e.Message }
