// Package reporoot finds the checkout of the staticip repository. It imports nothing outside
// the standard library: a tool or the e2e suite that needs the checkout must not link
// controller-runtime (internal/testenv), whose config package registers a global -kubeconfig
// flag at init and so panics every binary that defines its own ("flag redefined: kubeconfig").
package reporoot

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ModulePath is the product module's path: the go.mod that marks the repository's root.
const ModulePath = "github.com/staticip/staticip"

// Find walks up from the working directory to the go.mod of ModulePath.
func Find() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module "+ModulePath+"\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s above the working directory", ModulePath)
		}
		dir = parent
	}
}
