package cli

import (
	"errors"
	"flag"
	"testing"
)

// Binders add their flags; each check sees the parsed value, and a binder
// without a check adds none.
func TestBindAndRunChecks(t *testing.T) {
	type conf struct{}
	var got string
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	checks := Bind(fs, []FlagBinder[conf]{
		func(fs *flag.FlagSet) func(*conf) error {
			fs.StringVar(&got, "extra", "", "")
			return func(c *conf) error {
				if got != "v" {
					return errors.New("extra")
				}
				return nil
			}
		},
		func(fs *flag.FlagSet) func(*conf) error { return nil },
		func(*flag.FlagSet) func(*conf) error { return func(c *conf) error { return errors.New("always") } },
	})
	if len(checks) != 2 {
		t.Fatalf("%d checks", len(checks))
	}
	if err := fs.Parse([]string{"--extra", "v"}); err != nil {
		t.Fatal(err)
	}
	errs := checks.Run(&conf{})
	if len(errs) != 2 || errs[0] != nil || errs[1] == nil || errs[1].Error() != "always" {
		t.Fatalf("errors %v", errs)
	}
}
