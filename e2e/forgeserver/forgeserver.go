// Package forgeserver serves on loopback the commit status endpoints of GitHub, GitLab, Gitea
// and Bitbucket Cloud as their API documentation describes them (paths, authentication, the
// states each accepts, the fields each requires) and records the statuses it accepts. The
// tests of commit statuses post to it as the hub posts to a forge.
package forgeserver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
)

// Status is a commit status the server accepted.
type Status struct {
	Forge, Repo, SHA, Context, State, Description, URL string
}

// Server is a loopback forge of the four kinds, accepting requests that carry Token.
type Server struct {
	*httptest.Server
	Token string

	mu       sync.Mutex
	statuses []Status
	refused  int
}

// New starts a server accepting token; it stops with the test.
func New(t testing.TB, token string) *Server {
	s := &Server{Token: token}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /repos/{owner}/{repo}/statuses/{sha}", s.handler("github", "Bearer ", "Authorization", func(r *http.Request, b map[string]any) (Status, bool) {
		return fields(r, b, "context", "target_url", []string{"error", "failure", "pending", "success"})
	}))
	mux.HandleFunc("POST /api/v1/repos/{owner}/{repo}/statuses/{sha}", s.handler("gitea", "token ", "Authorization", func(r *http.Request, b map[string]any) (Status, bool) {
		return fields(r, b, "context", "target_url", []string{"pending", "success", "error", "failure", "warning"})
	}))
	mux.HandleFunc("POST /api/v4/projects/{id}/statuses/{sha}", s.handler("gitlab", "", "PRIVATE-TOKEN", func(r *http.Request, b map[string]any) (Status, bool) {
		st, ok := fields(r, b, "name", "target_url", []string{"pending", "running", "success", "failed", "canceled", "skipped"})
		st.Repo = r.PathValue("id") // the project's url-encoded path, decoded
		return st, ok
	}))
	mux.HandleFunc("POST /2.0/repositories/{owner}/{repo}/commit/{sha}/statuses/build", s.handler("bitbucket", "Bearer ", "Authorization", func(r *http.Request, b map[string]any) (Status, bool) {
		st, ok := fields(r, b, "key", "url", []string{"INPROGRESS", "SUCCESSFUL", "FAILED", "STOPPED"})
		key, _ := b["key"].(string)
		return st, ok && st.URL != "" && len(key) <= 40 // url is required, key at most 40
	}))
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// handler checks the credential and decodes the body; accept says whether the status is one
// the forge takes.
func (s *Server) handler(forge, scheme, header string, accept func(*http.Request, map[string]any) (Status, bool)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if r.Header.Get(header) != scheme+s.Token {
			s.refuse(w, http.StatusUnauthorized)
			return
		}
		if r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&body) != nil {
			s.refuse(w, http.StatusBadRequest)
			return
		}
		st, ok := accept(r, body)
		if !ok {
			s.refuse(w, http.StatusUnprocessableEntity)
			return
		}
		st.Forge = forge
		s.mu.Lock()
		s.statuses = append(s.statuses, st)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(body)
	}
}

func (s *Server) refuse(w http.ResponseWriter, code int) {
	s.mu.Lock()
	s.refused++
	s.mu.Unlock()
	http.Error(w, http.StatusText(code), code)
}

// fields reads a status's common fields: the context under key, the link under link, a
// state among states.
func fields(r *http.Request, b map[string]any, key, link string, states []string) (Status, bool) {
	st := Status{Repo: r.PathValue("owner") + "/" + r.PathValue("repo"), SHA: r.PathValue("sha")}
	st.State, _ = b["state"].(string)
	st.Context, _ = b[key].(string)
	st.Description, _ = b["description"].(string)
	st.URL, _ = b[link].(string)
	return st, slices.Contains(states, st.State) && st.Context != ""
}

// Statuses are the statuses accepted for a forge, in order.
func (s *Server) Statuses(forge string) []Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Status
	for _, st := range s.statuses {
		if st.Forge == forge {
			out = append(out, st)
		}
	}
	return out
}

// Refused is how many requests the server refused (bad credential, body or state).
func (s *Server) Refused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}
