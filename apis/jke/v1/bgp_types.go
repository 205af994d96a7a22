package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BGP advertisement (issue 36): each node's staticip-agent announces the IPRanges it serves —
// and the draining ones it still holds addresses of — with its own address as next hop, to the
// routers the BGPPeers name. No node-to-node mesh: inside the cluster staticip routes as it
// always did; BGP is for the network around it. Names and shapes follow Calico's
// (projectcalico.org/v3 BGPConfiguration, BGPPeer, CalicoNodeStatus).

// BGPConfigurationName is the name of the one BGPConfiguration the agents read.
const BGPConfigurationName = "default"

// BGP conditions.
const (
	// BGPPeerAccepted: the peer's configuration is usable (True), or why not (False: e.g. its
	// password Secret or key does not exist). Set by the controller-manager.
	BGPPeerAccepted = "Accepted"
	// BGPPeerHoldTimeSafe: the peer's hold time is shorter than the node-failover window
	// (True), or not (False, a warning): a dead node's routes leave the peer only when its
	// session's hold timer expires, so a longer hold time keeps traffic flowing to a node
	// whose ranges failover already moved to a spare.
	BGPPeerHoldTimeSafe = "HoldTimeSafe"
	// BGPPeerSessionsEstablished: every selected node's session to this peer is Established
	// (True), or how many are not (False), from the nodes' BGPNodeStatus objects.
	BGPPeerSessionsEstablished = "SessionsEstablished"
)

// BGPGracefulRestart is RFC 4724 graceful restart as the agent's speaker offers it.
type BGPGracefulRestart struct {
	// Enabled: when this node's agent restarts (or is killed), the peer keeps its routes for
	// restartTime instead of withdrawing them at once. Off by default: a node whose agent is
	// gone may be a node that is gone, and failover must be able to move its ranges.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// RestartTime is how long the peer keeps the routes of a restarting speaker (1s – 4095s).
	// Default 120s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('4095s')",message="restartTime must be between 1s and 4095s (RFC 4724: 12 bits of seconds)"
	RestartTime *metav1.Duration `json:"restartTime,omitempty"`
}

// BGPConfigurationSpec is the cluster's BGP speaker configuration.
// +kubebuilder:validation:XValidation:rule="!has(self.holdTime) || !has(self.keepaliveTime) || duration(self.keepaliveTime).getMilliseconds() * 3 <= duration(self.holdTime).getMilliseconds()",message="keepaliveTime must be at most a third of holdTime (RFC 4271)"
type BGPConfigurationSpec struct {
	// ASNumber is the cluster's own AS number (every node speaks with it). 4-byte ASNs allowed.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	ASNumber int64 `json:"asNumber"`
	// HoldTime proposed to every peer (3s – 65535s). Default 9s: a dead node's routes must
	// leave the peers well within the node-failover window (controller-manager's
	// --node-failover-window, 2m by default); the standard 90s would keep traffic going to a
	// node for 90s after it died. A peer may override it.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('3s') && duration(self) <= duration('65535s')",message="holdTime must be between 3s and 65535s (RFC 4271)"
	HoldTime *metav1.Duration `json:"holdTime,omitempty"`
	// KeepaliveTime: how often a keepalive is sent; at most a third of holdTime. Default 3s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="keepaliveTime must be at least 1s"
	KeepaliveTime *metav1.Duration `json:"keepaliveTime,omitempty"`
	// GracefulRestart for every peer (off by default); a peer may override it.
	// +optional
	GracefulRestart *BGPGracefulRestart `json:"gracefulRestart,omitempty"`
	// ListenPort: the TCP port the agents accept BGP sessions on; 0 or unset: they accept
	// none and only connect out to their peers (the peers see "connection refused" and keep
	// their side passive or retrying). Not 179 by default: the agent runs on the host network,
	// where port 179 belongs to whatever routing daemon the node may already run (FRR, BIRD,
	// a ToR's BGP unnumbered), and an agent that opened it would steal those sessions; an
	// outgoing session needs no listener.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	ListenPort int32 `json:"listenPort,omitempty"`
}

// BGPConfiguration is the cluster's BGP speaker configuration: one object, named "default".
// Without it (and at least one BGPPeer) no agent speaks BGP.
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=bgpconfig,categories=staticip
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'default'",message="the BGPConfiguration must be named default: the agents read only that one"
// +kubebuilder:printcolumn:name="ASN",type=integer,JSONPath=`.spec.asNumber`
// +kubebuilder:printcolumn:name="Hold",type=string,JSONPath=`.spec.holdTime`
// +kubebuilder:printcolumn:name="Keepalive",type=string,JSONPath=`.spec.keepaliveTime`
// +kubebuilder:printcolumn:name="Graceful-Restart",type=boolean,JSONPath=`.spec.gracefulRestart.enabled`
// +kubebuilder:printcolumn:name="Listen",type=integer,JSONPath=`.spec.listenPort`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BGPConfiguration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec BGPConfigurationSpec `json:"spec"`
}

// BGPConfigurationList is a list of BGPConfigurations.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type BGPConfigurationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BGPConfiguration `json:"items"`
}

// BGPSecretKeyRef names one key of a Secret in staticip's release namespace (the agents' own:
// they may read Secrets only there).
type BGPSecretKeyRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key in the Secret's data whose value is the password.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// BGPPassword is where a session's TCP MD5 password comes from.
type BGPPassword struct {
	// SecretKeyRef: the password is this key of this Secret.
	SecretKeyRef BGPSecretKeyRef `json:"secretKeyRef"`
}

// BGPPeerSpec is one router the selected nodes announce their ranges to.
// +kubebuilder:validation:XValidation:rule="!has(self.holdTime) || !has(self.keepaliveTime) || duration(self.keepaliveTime).getMilliseconds() * 3 <= duration(self.holdTime).getMilliseconds()",message="keepaliveTime must be at most a third of holdTime (RFC 4271)"
type BGPPeerSpec struct {
	// PeerIP is the router's address (IPv4 or IPv6).
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be a valid IP address such as 192.0.2.1"
	// +kubebuilder:validation:XValidation:rule="!isIP(self) || ip(self).isGlobalUnicast()",message="must be a routable unicast address: not unspecified, loopback, link-local or multicast"
	PeerIP string `json:"peerIP"`
	// ASNumber is the router's AS number: equal to the BGPConfiguration's for iBGP.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	ASNumber int64 `json:"asNumber"`
	// Port is the router's BGP port. Default 179.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port *int32 `json:"port,omitempty"`
	// NodeSelector chooses the nodes that peer with this router; empty or absent: every node
	// that runs the agent.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// Password (TCP MD5, RFC 2385) from a Secret in staticip's release namespace.
	// +optional
	Password *BGPPassword `json:"password,omitempty"`
	// EBGPMultihop is the TTL of the session's packets when the router is not on a link of
	// the node (eBGP multihop; 1 – 255). Unset: 1 for eBGP (directly connected).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=255
	EBGPMultihop *int32 `json:"ebgpMultihop,omitempty"`
	// HoldTime overrides the BGPConfiguration's for this peer. It must be shorter than the
	// node-failover window (condition HoldTimeSafe).
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('3s') && duration(self) <= duration('65535s')",message="holdTime must be between 3s and 65535s (RFC 4271)"
	HoldTime *metav1.Duration `json:"holdTime,omitempty"`
	// KeepaliveTime overrides the BGPConfiguration's for this peer.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="keepaliveTime must be at least 1s"
	KeepaliveTime *metav1.Duration `json:"keepaliveTime,omitempty"`
	// GracefulRestart overrides the BGPConfiguration's for this peer.
	// +optional
	GracefulRestart *BGPGracefulRestart `json:"gracefulRestart,omitempty"`
}

// BGPPeerStatus is what the cluster knows about the peer's configuration and sessions.
type BGPPeerStatus struct {
	// ObservedGeneration is the generation of the spec the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Accepted, HoldTimeSafe, SessionsEstablished.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BGPPeer is a router outside the cluster that the selected nodes announce their IPRanges to.
// Every route it sends is rejected: staticip only announces.
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=bgpp,categories=staticip
// +kubebuilder:printcolumn:name="Peer",type=string,JSONPath=`.spec.peerIP`
// +kubebuilder:printcolumn:name="ASN",type=integer,JSONPath=`.spec.asNumber`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Hold-Safe",type=string,JSONPath=`.status.conditions[?(@.type=="HoldTimeSafe")].status`
// +kubebuilder:printcolumn:name="Established",type=string,JSONPath=`.status.conditions[?(@.type=="SessionsEstablished")].status`
// +kubebuilder:printcolumn:name="Hold",type=string,JSONPath=`.spec.holdTime`,priority=1
// +kubebuilder:printcolumn:name="Multihop",type=integer,JSONPath=`.spec.ebgpMultihop`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BGPPeer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BGPPeerSpec   `json:"spec"`
	Status BGPPeerStatus `json:"status,omitempty"`
}

// BGPPeerList is a list of BGPPeers.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type BGPPeerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BGPPeer `json:"items"`
}

// BGPSessionState is a BGP session's finite-state-machine state (RFC 4271 8.2.2).
// +kubebuilder:validation:Enum=Idle;Connect;Active;OpenSent;OpenConfirm;Established;Unknown
type BGPSessionState string

// BGP session states.
const (
	BGPSessionIdle        BGPSessionState = "Idle"
	BGPSessionConnect     BGPSessionState = "Connect"
	BGPSessionActive      BGPSessionState = "Active"
	BGPSessionOpenSent    BGPSessionState = "OpenSent"
	BGPSessionOpenConfirm BGPSessionState = "OpenConfirm"
	BGPSessionEstablished BGPSessionState = "Established"
	BGPSessionUnknown     BGPSessionState = "Unknown"
)

// BGPNodePeerStatus is one session of a node.
type BGPNodePeerStatus struct {
	// Name of the BGPPeer.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// PeerIP of that BGPPeer.
	// +kubebuilder:validation:MaxLength=64
	PeerIP string `json:"peerIP"`
	// State of the session.
	State BGPSessionState `json:"state"`
	// Since is when the session entered its state.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// LastError is why the session last went down or failed to come up (a NOTIFICATION such
	// as "bad peer AS", a refused connection, a missing password), empty when none.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	LastError string `json:"lastError,omitempty"`
	// Advertised is how many prefixes the session announces now.
	// +optional
	Advertised int32 `json:"advertised,omitempty"`
	// Conditions of this node's session: Established (False with why: PeerNotAnswering,
	// BadPeerAS, NotificationReceived, PasswordUnavailable, InvalidPeer, NoLocalAddress, ...)
	// and HoldTimeSafe (False: a warning, the peer keeps a dead node's routes past the
	// node-failover window).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Conditions of a node's session (BGPNodePeerStatus.conditions; HoldTimeSafe is
// BGPPeerHoldTimeSafe).
const (
	// BGPNodePeerEstablished: True while the session is Established; False with the reason.
	BGPNodePeerEstablished = "Established"
)

// BGPNodeStatusStatus is what one node's speaker announces and to whom.
type BGPNodeStatusStatus struct {
	// Advertised are the prefixes the node announces (its served and draining ranges minus
	// the pools with disableBGPExport), sorted.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:MaxLength=64
	Advertised []string `json:"advertised,omitempty"`
	// Peers: one entry per BGPPeer that selects the node.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Peers []BGPNodePeerStatus `json:"peers,omitempty"`
	// UpdatedAt is when the agent last wrote this status.
	// +optional
	UpdatedAt *metav1.Time `json:"updatedAt,omitempty"`
}

// BGPNodeStatus is one node's BGP speaker status (Calico's CalicoNodeStatus): named after the
// node, created and written only by that node's staticip-agent (admission policy
// staticip-agent-bgp-status), so each node writes one small object of its own and nothing
// grows with the number of nodes.
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=bgpns,categories=staticip
// +kubebuilder:printcolumn:name="Advertised",type=string,JSONPath=`.status.advertised`
// +kubebuilder:printcolumn:name="Peers",type=string,JSONPath=`.status.peers[*].state`
// +kubebuilder:printcolumn:name="Updated",type=date,JSONPath=`.status.updatedAt`
type BGPNodeStatus struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Status BGPNodeStatusStatus `json:"status,omitempty"`
}

// BGPNodeStatusList is a list of BGPNodeStatuses.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type BGPNodeStatusList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BGPNodeStatus `json:"items"`
}
