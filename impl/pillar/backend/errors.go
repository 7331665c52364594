package backend

import "errors"

// The meanings a backend error can carry, each matching a gRPC code.
var (
	// ErrNotFound: the volume does not exist (NotFound).
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: a volume of that name exists but does not match the
	// request (AlreadyExists).
	ErrAlreadyExists = errors.New("already exists")
	// ErrResourceExhausted: not enough free space (ResourceExhausted).
	ErrResourceExhausted = errors.New("resource exhausted")
	// ErrInvalid: the request itself is wrong: a bad name, size or
	// parameter (InvalidArgument).
	ErrInvalid = errors.New("invalid argument")
	// ErrUnavailable: the pool, group or tools cannot be used right now:
	// missing pool, unreadable devices, tool not installed (Unavailable).
	ErrUnavailable = errors.New("unavailable")
	// ErrInUse: the volume is open, e.g. still exported (FailedPrecondition).
	ErrInUse = errors.New("in use")
	// ErrNotOwned: the name is taken by something this driver did not
	// create, e.g. another user's LV in a shared volume group; it is left
	// alone (FailedPrecondition).
	ErrNotOwned = errors.New("not a pillar-csi volume")
	// ErrOutOfRange: a size the request cannot have, e.g. a volume smaller
	// than the snapshot it is restored from (OutOfRange).
	ErrOutOfRange = errors.New("out of range")
)

var sentinels = []error{ErrNotFound, ErrAlreadyExists, ErrResourceExhausted, ErrInvalid, ErrUnavailable, ErrInUse, ErrNotOwned, ErrOutOfRange}

// Classify returns the sentinel an error carries, or nil for errors with
// no particular meaning (which the API edge reports as Internal).
func Classify(err error) error {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return s
		}
	}
	return nil
}
