package ipam

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// bucketNamespacePools: namespace -> the pools (JSON list of names) whose addresses its pods
// get when they name none themselves — the namespace's staticip.jke.jdcloud.com/ippools
// annotation or the pools whose namespaceSelector selects it (apis/poolchoice), as the node
// agent reads them from the API. Only namespaces with such pools are in it.
var bucketNamespacePools = []byte("namespacePools")

// SetNamespacePools makes m the namespaces' pools (namespace -> pool names, in order of
// preference; namespaces without a choice are left out). It writes only when something
// changed and reports whether it did.
func (d *DB) SetNamespacePools(m map[string][]string) (bool, error) {
	want := map[string][]byte{}
	for ns, pools := range m {
		if ns == "" || len(pools) == 0 {
			continue
		}
		v, err := json.Marshal(pools)
		if err != nil {
			return false, err
		}
		want[ns] = v
	}
	same := false
	if err := d.view(func(tx *bolt.Tx) error {
		have := map[string][]byte{}
		err := tx.Bucket(bucketNamespacePools).ForEach(func(k, v []byte) error {
			have[string(k)] = v
			return nil
		})
		same = maps.EqualFunc(have, want, bytes.Equal)
		return err
	}); err != nil || same {
		return false, err
	}
	return true, d.update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketNamespacePools); err != nil {
			return err
		}
		b, err := tx.CreateBucket(bucketNamespacePools)
		if err != nil {
			return err
		}
		for _, ns := range slices.Sorted(maps.Keys(want)) {
			if err := b.Put([]byte(ns), want[ns]); err != nil {
				return err
			}
		}
		return nil
	})
}

// NamespacePools returns the table SetNamespacePools wrote.
func (d *DB) NamespacePools() (map[string][]string, error) {
	out := map[string][]string{}
	err := d.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketNamespacePools).ForEach(func(k, v []byte) error {
			var pools []string
			if err := json.Unmarshal(v, &pools); err != nil {
				return decodeErr("namespace pools", k, err)
			}
			out[string(k)] = pools
			return nil
		})
	})
	return out, err
}

// namespacePools are the pools recorded for namespace ns (nil: none).
func (t *txn) namespacePools(ns string) ([]string, error) {
	v := t.tx.Bucket(bucketNamespacePools).Get([]byte(ns))
	if v == nil {
		return nil, nil
	}
	var pools []string
	if err := json.Unmarshal(v, &pools); err != nil {
		return nil, decodeErr("namespace pools", []byte(ns), err)
	}
	return pools, nil
}
