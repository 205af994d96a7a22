// Command registry is CNCF distribution's registry (github.com/distribution/distribution/v3,
// the OCI registry Docker Hub and most others run) with only the filesystem storage driver:
// upstream's cmd/registry also links the Azure, GCS and S3 drivers and the CloudFront
// middleware, whose SDKs are most of its module downloads and build time, and which a registry
// on this machine never uses. `registry serve config.yml`, as upstream's.
package main

import (
	"os"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	if err := registry.RootCmd.Execute(); err != nil {
		os.Exit(1)
	}
}
