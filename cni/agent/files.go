package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/staticip/staticip/apis/iprangeaddr"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/ipam"
)

// writeIfChanged writes data to path atomically (temp file + rename in the same directory),
// and only when the content differs, so the runtime never sees a half-written file and is not
// woken up for nothing.
func writeIfChanged(path string, data []byte, mode os.FileMode) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Close(); err != nil {
		return false, err
	}
	return true, os.Rename(tmp.Name(), path)
}

// InstallBinary copies the plugin into CNIBinDir/staticip when it differs. While neither the
// source nor the installed file has changed since the last call (same inode, size, mtime
// and ctime), it reads neither: every pass used to read and hash the whole binary twice,
// 3.4% of all busy CPU on a 3-node cluster replacing 50 pods (perf, controllers/README.md).
func (a *Agent) InstallBinary() (bool, error) {
	if a.cfg.PluginBinary == "" {
		return false, nil
	}
	dst := filepath.Join(a.cfg.CNIBinDir, "staticip")
	src, srcErr := stampOf(a.cfg.PluginBinary)
	installed, dstErr := stampOf(dst)
	if last := a.binaryStamps.Load(); srcErr == nil && dstErr == nil && last != nil && *last == [2]fileStamp{src, installed} {
		return false, nil
	}
	a.binaryCompares.Add(1)
	data, err := os.ReadFile(a.cfg.PluginBinary)
	if err != nil {
		return false, err
	}
	changed, err := writeIfChanged(dst, data, 0o755)
	if err != nil {
		return changed, err
	}
	// Stamps taken after the write: a copy that lands between the read and these stats is
	// caught by the next call only if it changes a stamp, which any write does (ctime).
	if src, srcErr = stampOf(a.cfg.PluginBinary); srcErr == nil {
		if installed, dstErr = stampOf(dst); dstErr == nil {
			a.binaryStamps.Store(&[2]fileStamp{src, installed})
		}
	}
	return changed, nil
}

// fileStamp identifies one version of a file without reading it.
type fileStamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

func stampOf(path string) (fileStamp, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileStamp{}, err
	}
	return fileStamp{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}, nil
}

// NetworkName is the name of the conflist the agent writes; it also keys the plugin's
// database (<data-dir>/<name>/ipam.db, ipam.ForNetwork).
const NetworkName = "staticip"

// Conflist renders the conflist for this node's ranges.
func (a *Agent) Conflist(ranges []*jkev1.IPRange) ([]byte, error) {
	var rs []map[string]any
	for _, r := range ranges {
		m := map[string]any{"subnet": r.Spec.CIDR}
		if r.Spec.Gateway != "" {
			m["gateway"] = r.Spec.Gateway
		}
		if r.Spec.RangeStart != "" {
			m["rangeStart"] = r.Spec.RangeStart
		}
		if r.Spec.RangeEnd != "" {
			m["rangeEnd"] = r.Spec.RangeEnd
		}
		if len(r.Spec.ExcludeIPs) > 0 {
			m["exclude"] = r.Spec.ExcludeIPs
		}
		rs = append(rs, m)
	}
	p := map[string]any{"type": "staticip", "dataDir": a.cfg.DataDir, "mtu": a.cfg.MTU, "ranges": rs,
		"capabilities": map[string]bool{"io.kubernetes.cri.pod-annotations": true, "ips": true}}
	if a.cfg.PluginKubeconfig != "" {
		p["kubeconfig"] = a.cfg.PluginKubeconfig
	}
	if a.cfg.Quarantine != "" {
		p["quarantine"] = a.cfg.Quarantine
	}
	plugins := []any{p}
	if a.cfg.PortMap {
		plugins = append(plugins, map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}})
	}
	return json.MarshalIndent(map[string]any{"cniVersion": a.cfg.CNIVersion, "name": NetworkName, "plugins": plugins}, "", "  ")
}

// toIPAMRange is the store's range of an IPRange, with the pool it was cut from and whether only
// pods choosing that pool get its addresses (a namespace pool's block, labelled by the allocator).
func toIPAMRange(r *jkev1.IPRange) (ipam.Range, error) {
	out, err := ipam.ParseRange(iprangeaddr.Fields{CIDR: r.Spec.CIDR, RangeStart: r.Spec.RangeStart, RangeEnd: r.Spec.RangeEnd,
		Gateway: r.Spec.Gateway, Exclude: r.Spec.ExcludeIPs})
	out.Pool, out.Restricted = r.Labels[jkev1.LabelIPPool], r.Labels[jkev1.LabelIPPoolRestricted] == "true"
	return out, err
}

// installFiles installs the plugin binary and its kubeconfig: all a node needs for pods to
// start, also while the API server cannot be reached.
func (a *Agent) installFiles() []error {
	var errs []error
	if changed, err := a.InstallBinary(); err != nil {
		errs = append(errs, fmt.Errorf("install binary: %w", err))
	} else if changed {
		a.logf("installed %s", filepath.Join(a.cfg.CNIBinDir, "staticip"))
	}
	if c := a.cfg.PluginCredentials; c != nil && a.cfg.PluginKubeconfig != "" {
		path := filepath.Join(a.cfg.CNIConfDir, filepath.Base(a.cfg.PluginKubeconfig))
		data, err := c.pluginKubeconfig()
		if err == nil {
			var changed bool
			if changed, err = writeIfChanged(path, data, 0o600); changed {
				a.logf("wrote the plugin's kubeconfig %s (server %s)", path, c.Server)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("plugin kubeconfig: %w", err))
		}
	}
	return errs
}
