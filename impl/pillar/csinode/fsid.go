package csinode

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	utilexec "k8s.io/utils/exec"
)

// CtxCopyOf is the volume context key the controller sets on a volume
// made from a snapshot or another volume ("snapshot" or "volume"): its
// filesystem starts as a byte copy of the source's, identity included.
const CtxCopyOf = "copyOf"

// mountOptions are the options a staged filesystem is mounted with. XFS
// refuses to mount a second filesystem with the UUID of a mounted one,
// which a restored snapshot or a clone has until told otherwise; nouuid
// lifts that check (docs/pillar-csi.md, "Copies and filesystem UUIDs").
func mountOptions(fs string, flags []string) []string {
	opts := slices.Clone(flags)
	if fs == "xfs" && !slices.Contains(opts, "nouuid") {
		opts = append(opts, "nouuid")
	}
	return opts
}

// FilesystemUUID is the filesystem UUID a copy's ext4 is given at its
// first stage: derived from the volume id, so it differs from its
// source's and a later stage finds it already set.
func FilesystemUUID(volumeID string) string {
	h := sha256.Sum256([]byte("pillar-csi/filesystem/" + volumeID))
	u := h[:16]
	u[6] = (u[6] & 0x0f) | 0x50
	u[8] = (u[8] & 0x3f) | 0x80
	x := hex.EncodeToString(u)
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// ownExt4UUID gives the ext4 filesystem on dev the volume's own UUID
// when it carries another (the source's). A blank device or another
// filesystem is left alone. With metadata_csum the checksum seed is kept
// in the superblock first (metadata_csum_seed), so the change rewrites
// the superblock only and needs no full check of a copy taken while its
// source was mounted.
func ownExt4UUID(ex utilexec.Interface, dev, volumeID string) (changed bool, err error) {
	out, err := ex.Command("tune2fs", "-l", dev).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "Bad magic number") || strings.Contains(string(out), "Couldn't find valid filesystem superblock") {
			return false, nil // not ext4: formatted (or refused) by FormatAndMount
		}
		return false, fmt.Errorf("tune2fs -l %s: %w: %s", dev, err, strings.TrimSpace(string(out)))
	}
	var uuid, features string
	for _, l := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "Filesystem UUID":
			uuid = strings.TrimSpace(v)
		case "Filesystem features":
			features = " " + strings.TrimSpace(v) + " "
		}
	}
	want := FilesystemUUID(volumeID)
	if uuid == "" || uuid == want {
		return false, nil
	}
	args := []string{"-U", want, dev}
	if strings.Contains(features, " metadata_csum ") {
		args = append([]string{"-O", "metadata_csum_seed"}, args...)
	}
	if out, err := ex.Command("tune2fs", args...).CombinedOutput(); err != nil {
		return false, fmt.Errorf("tune2fs %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return true, nil
}

// growExt4 grows the ext4 filesystem on the unmounted dev to the device
// when the device is larger: a copy made at a larger size than its source
// starts with the source's filesystem. Offline, before the mount, because
// growing a mounted ext4 needs CAP_SYS_RESOURCE, which the node plugin may
// lack; resize2fs requires a forced check of an unmounted filesystem
// first. A device that holds no ext4 is left alone.
func growExt4(ex utilexec.Interface, dev string) (grown bool, err error) {
	out, err := ex.Command("dumpe2fs", "-h", dev).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "Bad magic number") || strings.Contains(string(out), "Couldn't find valid filesystem superblock") {
			return false, nil
		}
		return false, fmt.Errorf("dumpe2fs -h %s: %w: %s", dev, err, strings.TrimSpace(string(out)))
	}
	var blocks, blockSize int64
	for _, l := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "Block count":
			blocks, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		case "Block size":
			blockSize, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	if blocks == 0 || blockSize == 0 {
		return false, fmt.Errorf("dumpe2fs -h %s: no block count and size in its output", dev)
	}
	out, err = ex.Command("blockdev", "--getsize64", dev).CombinedOutput()
	if err != nil {
		return false, fmt.Errorf("blockdev --getsize64 %s: %w: %s", dev, err, strings.TrimSpace(string(out)))
	}
	size, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return false, fmt.Errorf("blockdev --getsize64 %s: %q: %w", dev, out, err)
	}
	if size < (blocks+1)*blockSize {
		return false, nil
	}
	// e2fsck exits 1 when it corrected something (a copy taken while its
	// source was mounted has a journal to replay), which is no failure.
	if out, err := ex.Command("e2fsck", "-f", "-p", dev).CombinedOutput(); err != nil {
		var ee utilexec.ExitError
		if !errors.As(err, &ee) || ee.ExitStatus() > 1 {
			return false, fmt.Errorf("e2fsck -f -p %s: %w: %s", dev, err, strings.TrimSpace(string(out)))
		}
	}
	if out, err := ex.Command("resize2fs", dev).CombinedOutput(); err != nil {
		return false, fmt.Errorf("resize2fs %s: %w: %s", dev, err, strings.TrimSpace(string(out)))
	}
	return true, nil
}
