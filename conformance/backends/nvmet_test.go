package backends_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/pillarhq/pillar/impl/pillar/nvmet/nvmettest"
	"github.com/pillarhq/pillar/sim/configfs"
)

var devSeq atomic.Int64

// The exporter's suite on the configfs fake; scripts/qemu runs the same
// suite on the real kernel target.
func TestExporterOnFakeConfigfs(t *testing.T) {
	nvmettest.Exercise(t, func(t *testing.T) nvmettest.Target {
		root := "/sys/kernel/config/nvmet"
		fs := configfs.New(root)
		return nvmettest.Target{FS: fs, Root: root, Device: func(*testing.T) string {
			d := fmt.Sprintf("/dev/sim/vol%d", devSeq.Add(1))
			fs.AddDevice(d)
			return d
		}}
	})
}
