package grid

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
)

// ServiceTopologyKeys is the topologyKeys annotation a ServiceGrid's Service gets:
// spec.topologyKeys when set, else the grid's own topologyKeys annotation when it has one (a JSON
// list of label keys, e.g. ["zone","*"] for a fallback to any endpoint), else ["<gridUniqKey>"]
// as SuperEdge writes it. Keys that application-grid-wrapper would reject (superedgev1's one
// parser) are an error: the grid must not look Ready while every wrapper passes the Service's
// endpoints unfiltered.
func ServiceTopologyKeys(g *superedgev1.ServiceGrid) (string, error) {
	own, annotated := g.Annotations[superedgev1.AnnotationTopologyKeys]
	switch {
	case len(g.Spec.TopologyKeys) > 0 && annotated:
		return "", fmt.Errorf("spec.topologyKeys and the annotation %s are both set: set one", superedgev1.AnnotationTopologyKeys)
	case len(g.Spec.TopologyKeys) > 0:
		// The API server checks the same rule (CEL); this covers objects stored before it.
		if err := superedgev1.ValidateTopologyKeys(g.Spec.TopologyKeys); err != nil {
			return "", fmt.Errorf("spec.topologyKeys: %w", err)
		}
		return TopologyKeys(g.Spec.TopologyKeys...), nil
	case annotated:
		keys, err := superedgev1.ParseTopologyKeys(own)
		if err != nil {
			return "", fmt.Errorf("annotation %w", err)
		}
		return TopologyKeys(keys...), nil
	}
	return TopologyKeys(g.Spec.GridUniqKey), nil
}

// DesiredService is the ServiceGrid's Service: a deep copy of the template, the grid labels
// and the topologyKeys annotation.
func DesiredService(g *superedgev1.ServiceGrid, name, topologyKeys string) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: g.Namespace,
			Labels:    gridLabels(g.Name, g.Spec.GridUniqKey, ""),
			Annotations: map[string]string{
				superedgev1.AnnotationGridUniqKey:  g.Spec.GridUniqKey,
				superedgev1.AnnotationTopologyKeys: topologyKeys,
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(g, ServiceGridKind)},
		},
		Spec: *g.Spec.Template.DeepCopy(),
	}
	stamp(&s.ObjectMeta, s.Spec)
	return s
}

// ServiceUpdate returns the update to write, or nil when existing is what the grid wants.
// The template replaces the spec, but what the API server allocated and the template leaves
// open is kept — clusterIP(s), ipFamilies/ipFamilyPolicy, each port's nodePort (matched by
// name, else by port and protocol), healthCheckNodePort — so a reconcile never asks for a new
// address or port.
func ServiceUpdate(existing, desired *corev1.Service) *corev1.Service {
	if !metaNeedsUpdate(existing, desired) {
		return nil
	}
	out := existing.DeepCopy()
	mergeMeta(&out.ObjectMeta, desired)
	spec := *desired.Spec.DeepCopy()
	cur := existing.Spec
	if spec.Type != corev1.ServiceTypeExternalName {
		if spec.ClusterIP == "" {
			spec.ClusterIP = cur.ClusterIP
		}
		if len(spec.ClusterIPs) == 0 && (spec.ClusterIP == cur.ClusterIP) {
			spec.ClusterIPs = cur.ClusterIPs
		}
		if len(spec.IPFamilies) == 0 {
			spec.IPFamilies = cur.IPFamilies
		}
		if spec.IPFamilyPolicy == nil {
			spec.IPFamilyPolicy = cur.IPFamilyPolicy
		}
	}
	if spec.Type == corev1.ServiceTypeNodePort || spec.Type == corev1.ServiceTypeLoadBalancer {
		for i := range spec.Ports {
			p := &spec.Ports[i]
			if p.NodePort != 0 {
				continue
			}
			for _, q := range cur.Ports {
				if (p.Name != "" && p.Name == q.Name) || (p.Name == "" && p.Port == q.Port && protocol(p) == protocol(&q)) {
					p.NodePort = q.NodePort
					break
				}
			}
		}
		if spec.HealthCheckNodePort == 0 && spec.Type == corev1.ServiceTypeLoadBalancer && spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
			spec.HealthCheckNodePort = cur.HealthCheckNodePort
		}
	}
	out.Spec = spec
	return out
}

func protocol(p *corev1.ServicePort) corev1.Protocol {
	if p.Protocol == "" {
		return corev1.ProtocolTCP
	}
	return p.Protocol
}
