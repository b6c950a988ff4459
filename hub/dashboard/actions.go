package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/operate"
)

// Action is what a person does from the page: one of hub/operate's operations, the ones the
// CLI performs, under the person's own identity.
type Action string

const (
	ActionApprove       Action = "approve"
	ActionReject        Action = "reject"
	ActionPauseBundle   Action = "pause-bundle"
	ActionResumeBundle  Action = "resume-bundle"
	ActionPauseCluster  Action = "pause-cluster"
	ActionResumeCluster Action = "resume-cluster"
	ActionSkip          Action = "skip"
	ActionRollback      Action = "rollback"
	ActionRetry         Action = "retry"
	ActionStartRun      Action = "start-run"
	ActionStopRun       Action = "stop-run"
)

// actionRequest is an action's JSON body.
type actionRequest struct {
	Action    Action `json:"action"`
	Namespace string `json:"namespace"`
	// Run, Stage, Group and After name a gate (approve, reject) or what to skip; Gate is the
	// skipped gate (Before, After) when a gate is skipped.
	Run     string `json:"run,omitempty"`
	Stage   string `json:"stage,omitempty"`
	Group   string `json:"group,omitempty"`
	After   bool   `json:"after,omitempty"`
	Gate    string `json:"gate,omitempty"`
	Cluster string `json:"cluster,omitempty"`
	Bundle  string `json:"bundle,omitempty"`
	// Revision is the revision to roll back to or to retry.
	Revision int64  `json:"revision,omitempty"`
	Comment  string `json:"comment,omitempty"`
}

// actionResult is the answer the page shows.
type actionResult struct {
	Message string `json:"message,omitempty"`
	Error   string `json:"error,omitempty"`
	// Reason is the API server's reason (Forbidden, Conflict, Invalid …) for a refusal.
	Reason string `json:"reason,omitempty"`
}

// act carries out one action with a client of the person's identity and says what happened.
func act(ctx context.Context, c client.Client, req actionRequest) (string, error) {
	ns := req.Namespace
	gate := operate.Gate{Stage: req.Stage, Group: req.Group, After: req.After}
	switch req.Action {
	case ActionApprove:
		name, already, err := operate.Approve(ctx, c, ns, req.Run, gate, req.Comment)
		if already {
			return "you approved " + name + " already", err
		}
		return "approved " + name, err
	case ActionReject:
		name, err := operate.Reject(ctx, c, ns, req.Run, gate, req.Comment)
		return "rejected " + name + ": the run stops", err
	case ActionPauseBundle, ActionResumeBundle, ActionPauseCluster, ActionResumeCluster:
		what, name := operate.PauseBundle, req.Bundle
		if req.Action == ActionPauseCluster || req.Action == ActionResumeCluster {
			what, name = operate.PauseCluster, req.Cluster
		}
		pause := req.Action == ActionPauseBundle || req.Action == ActionPauseCluster
		changed, err := operate.SetPaused(ctx, c, what, ns, name, pause)
		state := map[bool]string{true: "paused", false: "resumed"}[pause]
		if !changed && err == nil {
			state = "unchanged: it was " + map[bool]string{true: "paused", false: "not paused"}[pause] + " already"
		}
		return fmt.Sprintf("%s %s %s", what, name, state), err
	case ActionSkip:
		skip := v1alpha1.RunSkip{Stage: req.Stage, Group: req.Group, Cluster: req.Cluster, Gate: req.Gate}
		return "skip recorded on run " + req.Run, operate.Skip(ctx, c, ns, req.Run, skip)
	case ActionStartRun, ActionStopRun:
		state := v1alpha1.RunRun
		if req.Action == ActionStopRun {
			state = v1alpha1.RunStop
		}
		return fmt.Sprintf("run %s set to %s", req.Run, state), operate.SetRunState(ctx, c, ns, req.Run, state)
	case ActionRollback, ActionRetry:
		me, err := operate.Whoami(ctx, c)
		if err != nil {
			return "", err
		}
		var res operate.RollbackResult
		msg := fmt.Sprintf("bundle %s rolls back to revision %d", req.Bundle, req.Revision)
		if req.Action == ActionRollback {
			res, err = operate.Rollback(ctx, c, ns, req.Bundle, req.Revision, me)
		} else {
			msg = fmt.Sprintf("bundle %s: revision %d rolls out again", req.Bundle, req.Revision)
			res, err = operate.Retry(ctx, c, ns, req.Bundle, req.Revision, me)
		}
		if res.Run != "" {
			msg += "; started run " + res.Run
		}
		return msg, err
	}
	return "", &operate.ErrInput{Err: fmt.Errorf("unknown action %q", req.Action)}
}

// serveAction handles POST /api/action.
func (s *Server) serveAction(w http.ResponseWriter, r *http.Request, id Identity) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	if !s.sameOrigin(r, id) {
		writeJSON(w, http.StatusForbidden, actionResult{Error: "refused: the request does not come from this dashboard's page (CSRF check)", Reason: "CSRF"})
		return
	}
	var req actionRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, actionResult{Error: "bad request: " + err.Error()})
		return
	}
	c, err := newClient(s.config(id), s.scheme)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, actionResult{Error: err.Error()})
		return
	}
	msg, err := act(r.Context(), c, req)
	// The API server's audit log has the write as the person; this says it came from a page.
	log.FromContext(r.Context()).WithName("dashboard").Info("action", "user", id.User, "action", req.Action, "namespace", req.Namespace,
		"bundle", req.Bundle, "cluster", req.Cluster, "run", req.Run, "stage", req.Stage, "result", cmpOr(errText(err), msg))
	if err != nil {
		status, reason := http.StatusInternalServerError, ""
		var input *operate.ErrInput
		var apiStatus apierrors.APIStatus
		switch {
		case errors.As(err, &apiStatus):
			status, reason = int(apiStatus.Status().Code), string(apiStatus.Status().Reason)
		case errors.As(err, &input):
			status = http.StatusBadRequest
		}
		if status == 0 {
			status = http.StatusInternalServerError
		}
		writeJSON(w, status, actionResult{Error: err.Error(), Reason: reason})
		return
	}
	writeJSON(w, http.StatusOK, actionResult{Message: msg})
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
