package csinode

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
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
