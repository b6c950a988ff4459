package clusters

import (
	"fmt"
	"net/url"
	"os"

	"strings"

	"k8s.io/client-go/rest"
)

// AgentEndpoint is the hub API server address and CA that registration tokens give agents,
// in their Secret (ca.crt, server). Agents run on other clusters: the address the hub itself
// dials from inside its own cluster is rarely one they can reach.
type AgentEndpoint struct {
	Server string
	Ca     []byte
	// inCluster: no address was set for agents (Options.Server), and the hub's own is the
	// in-cluster one, which no other cluster reaches. Tokens are then issued without an
	// address, and say why; `flotilla agent install --api-server-url` or the hub's
	// --agent-api-server-url gives one.
	InCluster bool
}

// ResolveAgentEndpoint takes the operator's server and caCert (Options.Server and
// Options.CACert), or else the hub's own connection (hub): its host, and its CA whether the
// kubeconfig holds it as data or names its file.
func ResolveAgentEndpoint(server string, caCert []byte, hub *rest.Config, getenv func(string) string) (AgentEndpoint, error) {
	e := AgentEndpoint{Server: server, Ca: caCert}
	if e.Server == "" && hub != nil {
		e.Server = hub.Host
		e.InCluster = isInClusterAddress(e.Server, getenv)
	}
	if len(e.Ca) == 0 && hub != nil {
		e.Ca = hub.CAData
		if len(e.Ca) == 0 && hub.CAFile != "" {
			data, err := os.ReadFile(hub.CAFile)
			if err != nil {
				return e, fmt.Errorf("failed to read the API server's CA for agents: %w", err)
			}
			e.Ca = data
		}
	}
	return e, nil
}

// inClusterHosts are the names a cluster's own API server has inside it.
var inClusterHosts = []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}

// isInClusterAddress reports whether server is the API server's address inside its own
// cluster: the kubernetes Service (by the address the pod's environment gives it, or by name).
func isInClusterAddress(server string, getenv func(string) string) bool {
	u, err := url.Parse(server)
	if err != nil {
		return false
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if svc := getenv("KUBERNETES_SERVICE_HOST"); svc != "" && host == strings.ToLower(svc) {
		return true
	}
	for _, h := range inClusterHosts {
		if host == h {
			return true
		}
	}
	return false
}

// inClusterMessage says why a token's Secret holds no address.
func (e AgentEndpoint) inClusterMessage() string {
	return fmt.Sprintf("the hub reaches its API server at %s, an in-cluster address that agents on other clusters cannot reach: "+
		"set the hub's --agent-api-server-url (chart value agentAPIServer.url), or give each agent one with flotilla agent install --api-server-url", e.Server)
}
