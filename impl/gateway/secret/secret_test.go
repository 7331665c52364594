package secret

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testBox(t *testing.T) *Box {
	t.Helper()
	b, err := New(bytes.Repeat([]byte{7}, KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// P-UP-2: credentials are stored encrypted; the ciphertext never contains the plaintext.
func TestSealOpenRoundTrip(t *testing.T) {
	t.Parallel()
	b := testBox(t)
	pt := []byte("sk-ant-secret-value")
	ct, err := b.Seal(pt, []byte("upstream-credential:up_1"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(ct, pt) {
		t.Fatal("ciphertext contains the plaintext")
	}
	got, err := b.Open(ct, []byte("upstream-credential:up_1"))
	if err != nil || string(got) != string(pt) {
		t.Fatalf("Open = %q, %v", got, err)
	}
	ct2, _ := b.Seal(pt, []byte("upstream-credential:up_1"))
	if bytes.Equal(ct, ct2) {
		t.Fatal("two seals of the same plaintext are identical: nonce reuse")
	}
}

func TestOpenRejectsWrongBindingOrTampering(t *testing.T) {
	t.Parallel()
	b := testBox(t)
	ct, _ := b.Seal([]byte("secret"), []byte("upstream-credential:up_1"))
	if _, err := b.Open(ct, []byte("upstream-credential:up_2")); !errors.Is(err, ErrOpen) {
		t.Fatalf("other associated data: err = %v", err)
	}
	for i := range ct {
		bad := bytes.Clone(ct)
		bad[i] ^= 1
		if _, err := b.Open(bad, []byte("upstream-credential:up_1")); !errors.Is(err, ErrOpen) {
			t.Fatalf("flipped byte %d: err = %v", i, err)
		}
	}
	other, _ := New(bytes.Repeat([]byte{8}, KeySize))
	if _, err := other.Open(ct, []byte("upstream-credential:up_1")); !errors.Is(err, ErrOpen) {
		t.Fatalf("other key: err = %v", err)
	}
	if _, err := b.Open(ct[:5], nil); !errors.Is(err, ErrOpen) {
		t.Fatalf("short: err = %v", err)
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	hexKey := "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	k, err := ParseKey(hexKey)
	if err != nil || k[31] != 0x1f {
		t.Fatalf("hex: %v", err)
	}
	if _, err := ParseKey("c2hvcnQ="); err == nil {
		t.Fatal("short key accepted")
	}
	if _, err := New(make([]byte, 16)); err == nil {
		t.Fatal("16-byte key accepted")
	}
}

func TestKeyFileCreatedOnceWithMode0600(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "proxy.db.key")
	k1, created, err := LoadOrCreateKeyFile(path)
	if err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v, %v", st.Mode().Perm(), err)
	}
	k2, created, err := LoadOrCreateKeyFile(path)
	if err != nil || created || !bytes.Equal(k1, k2) {
		t.Fatalf("reload: created=%v err=%v equal=%v", created, err, bytes.Equal(k1, k2))
	}
	os.WriteFile(path, []byte("garbage"), 0o600)
	if _, _, err := LoadOrCreateKeyFile(path); err == nil {
		t.Fatal("garbage key file accepted")
	}
}

// A secret file that group or others can read is refused with its name and
// mode; 0600 and 0400 are accepted.
func TestReadSecretFileRefusesOpenModes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o600, true}, {0o400, true}, {0o644, false}, {0o640, false}, {0o604, false}, {0o620, false}} {
		path := filepath.Join(dir, tc.mode.String())
		if err := os.WriteFile(path, []byte("s3cret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, tc.mode); err != nil {
			t.Fatal(err)
		}
		data, err := ReadSecretFile(path)
		if tc.ok {
			if err != nil || string(data) != "s3cret\n" {
				t.Errorf("mode %04o: %q, %v", tc.mode, data, err)
			}
			continue
		}
		if !errors.Is(err, ErrFileMode) {
			t.Fatalf("mode %04o: err %v, want ErrFileMode", tc.mode, err)
		}
		for _, want := range []string{path, fmt.Sprintf("%04o", tc.mode)} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("mode %04o: error %q does not name %q", tc.mode, err, want)
			}
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error repeats the secret: %q", err)
		}
	}
}

// The master key file is refused at 0644 rather than used silently.
func TestLoadKeyFileRefusesOpenMode(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "proxy.db.key")
	if _, _, err := LoadOrCreateKeyFile(path); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateKeyFile(path); err != nil {
		t.Fatalf("0600 file refused: %v", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateKeyFile(path); !errors.Is(err, ErrFileMode) {
		t.Fatalf("0644 key file: err %v, want ErrFileMode", err)
	}
}
