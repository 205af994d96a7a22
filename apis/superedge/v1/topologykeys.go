package v1

import (
	"encoding/json"
	"fmt"
)

// TopologyKeyAny as a topologyKeys entry selects every endpoint. Only allowed as the last key.
const TopologyKeyAny = "*"

// ParseTopologyKeys reads the value of the AnnotationTopologyKeys annotation: a JSON list of
// node label keys (ValidateTopologyKeys says which lists are valid). It is the one parser: the
// grid controller refuses a ServiceGrid whose keys it rejects, and application-grid-wrapper
// passes the endpoints of a Service whose annotation it rejects unfiltered, so the two must
// never disagree.
func ParseTopologyKeys(value string) ([]string, error) {
	var keys []string
	if err := json.Unmarshal([]byte(value), &keys); err != nil {
		return nil, fmt.Errorf("%s %q is not a JSON list of strings: %w", AnnotationTopologyKeys, value, err)
	}
	if err := ValidateTopologyKeys(keys); err != nil {
		return nil, fmt.Errorf("%s %q: %w", AnnotationTopologyKeys, value, err)
	}
	return keys, nil
}

// ValidateTopologyKeys is the rule for a list of topologyKeys: not empty, no empty key, no key
// twice, TopologyKeyAny only last (as upstream's old Service.spec.topologyKeys), so that a typo
// never silently changes where traffic goes. The ServiceGrid CRD's CEL rules on
// spec.topologyKeys express the same rule (grid_types.go).
func ValidateTopologyKeys(keys []string) error {
	if len(keys) == 0 {
		return fmt.Errorf("an empty list")
	}
	seen := make(map[string]bool, len(keys))
	for i, k := range keys {
		switch {
		case k == "":
			return fmt.Errorf("key %d is empty", i)
		case k == TopologyKeyAny && i != len(keys)-1:
			return fmt.Errorf("%q may only be the last key", TopologyKeyAny)
		case seen[k]:
			return fmt.Errorf("key %q appears twice", k)
		}
		seen[k] = true
	}
	return nil
}
