package storagetools

import "fmt"

// EnsurePool creates a zpool of size bytes and its parent dataset
// (relative to the pool, may be empty) when they are missing, so a
// simulated agent can start on a configuration without manual setup.
func (h *Host) EnsurePool(name, parentDataset string, size int64) error {
	st, _, err := h.load()
	if err != nil {
		return err
	}
	if _, ok := st.Pools[name]; !ok {
		if err := h.CreatePool(name, size); err != nil {
			return err
		}
	}
	if parentDataset == "" {
		return nil
	}
	if _, ok := st.Datasets[name+"/"+parentDataset]; ok {
		return nil
	}
	return h.CreateDataset(name + "/" + parentDataset)
}

// EnsureVolumeGroup creates a volume group of size bytes and, when thinPool
// is set, a thin pool taking half of it, when they are missing.
func (h *Host) EnsureVolumeGroup(name, thinPool string, size int64) error {
	st, _, err := h.load()
	if err != nil {
		return err
	}
	vg, ok := st.VolumeGroups[name]
	if !ok {
		if err := h.CreateVolumeGroup(name, size, 0); err != nil {
			return err
		}
	}
	if thinPool == "" {
		return nil
	}
	if ok {
		if lv, found := vg.LVs[thinPool]; found {
			if lv.Type != lvThinPool {
				return fmt.Errorf("storagetools: %s/%s exists and is not a thin pool", name, thinPool)
			}
			return nil
		}
	}
	return h.CreateThinPool(name, thinPool, size/2)
}
