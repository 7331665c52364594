package cli

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code int
		out  string
	}{
		{"nil", nil, 0, ""},
		{"failure", errors.New("listen: busy"), 1, "bin: listen: busy\n"},
		{"usage, every error", Usage(errors.Join(errors.New("--a: bad"), errors.New("--b: bad"))), 2, "bin: --a: bad\nbin: --b: bad\n"},
		{"usage wrapped", fmt.Errorf("x: %w", Usage(errors.New("bad"))), 2, "bin: x: bad\n"},
		{"usage already printed", &UsageError{Err: errors.New("flag provided but not defined: -x"), Printed: true}, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if got := ExitCode("bin", tc.err, &out); got != tc.code || out.String() != tc.out {
				t.Fatalf("ExitCode = %d, %q; want %d, %q", got, out.String(), tc.code, tc.out)
			}
		})
	}
	if Usage(nil) != nil {
		t.Fatal("Usage(nil) is not nil")
	}
}
