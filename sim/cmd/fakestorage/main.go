// Command fakestorage is the multi-call binary of the simulated storage
// tools (sim/storagetools): symlinked as zfs, zpool, lvcreate, lvextend,
// lvremove, lvs or vgs it acts as that tool; under its own name it also
// offers setup commands (fakestorage --help).
package main

import (
	"os"

	"github.com/pillarhq/pillar/sim/storagetools"
)

func main() {
	os.Exit(storagetools.Main(os.Args, os.Getenv, os.Stdout, os.Stderr))
}
