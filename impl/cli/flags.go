package cli

import "flag"

// FlagBinder adds flags to a command's flag set (a WithFlags option) and
// returns the check to run on the parsed configuration, nil for none.
type FlagBinder[C any] func(fs *flag.FlagSet) (check func(*C) error)

// Checks are the checks of the flags binders added.
type Checks[C any] []func(*C) error

// Bind runs every binder on fs and keeps their checks.
func Bind[C any](fs *flag.FlagSet, binders []FlagBinder[C]) Checks[C] {
	var cs Checks[C]
	for _, bind := range binders {
		if check := bind(fs); check != nil {
			cs = append(cs, check)
		}
	}
	return cs
}

// Run runs every check on c and returns what they found (nil entries for
// those that passed, for errors.Join).
func (cs Checks[C]) Run(c *C) []error {
	errs := make([]error, 0, len(cs))
	for _, check := range cs {
		errs = append(errs, check(c))
	}
	return errs
}
