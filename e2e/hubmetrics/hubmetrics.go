// Package hubmetrics reads what tests ask of a hub process's metrics endpoint (plain HTTP, as
// the tests serve it).
package hubmetrics

import (
	"bufio"
	"net/http"
	"strings"

	"github.com/flotilla-dev/flotilla/hub/model"
)

// Leads says whether the hub serving metrics at addr (host:port) holds its Lease; false when it
// does not answer.
func Leads(addr string) bool {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), `leader_election_master_status{name="`+model.LeaderElectionID+`"}`) {
			return strings.HasSuffix(sc.Text(), " 1")
		}
	}
	return false
}
