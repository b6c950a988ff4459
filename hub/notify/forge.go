package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/endpoint"
)

// forgeBase is a forge's API when its provider sets no address.
var forgeBase = map[v1alpha1.NotificationProviderType]string{
	v1alpha1.ProviderGitHub:    "https://api.github.com",
	v1alpha1.ProviderGitLab:    "https://gitlab.com",
	v1alpha1.ProviderBitbucket: "https://api.bitbucket.org",
}

// PostCommitStatus sets a commit's status on the forge of ep, for the repository at path
// (owner/name). link, when set, is where the status points (the dashboard).
func PostCommitStatus(ctx context.Context, ep *Endpoint, path string, s CommitStatus, link string) error {
	req, err := forgeRequest(ep, path, s, link)
	if err != nil {
		return ep.scrubbed(&finalError{err})
	}
	return ep.send(ctx, req, "forge")
}

// forgeRequest builds the request each forge documents for a commit status.
func forgeRequest(ep *Endpoint, path string, s CommitStatus, link string) (*http.Request, error) {
	base := strings.TrimSuffix(ep.URL, "/")
	if base == "" {
		base = forgeBase[ep.Type]
	}
	owner, name, _ := strings.Cut(path, "/")
	sha := url.PathEscape(s.SHA)
	var target string
	var body map[string]any
	header := http.Header{}
	switch ep.Type {
	case v1alpha1.ProviderGitHub:
		// POST /repos/{owner}/{repo}/statuses/{sha}: state pending|success|failure.
		target = fmt.Sprintf("%s/repos/%s/%s/statuses/%s", base, url.PathEscape(owner), url.PathEscape(name), sha)
		body = map[string]any{"state": string(s.State), "context": s.Context, "description": s.Description}
		header.Set("Accept", "application/vnd.github+json")
		header.Set("Authorization", "Bearer "+ep.Token)
	case v1alpha1.ProviderGitea:
		// POST /api/v1/repos/{owner}/{repo}/statuses/{sha}: state pending|success|failure.
		target = fmt.Sprintf("%s/api/v1/repos/%s/%s/statuses/%s", base, url.PathEscape(owner), url.PathEscape(name), sha)
		body = map[string]any{"state": string(s.State), "context": s.Context, "description": s.Description}
		header.Set("Authorization", "token "+ep.Token)
	case v1alpha1.ProviderGitLab:
		// POST /api/v4/projects/{id or url-encoded path}/statuses/{sha}: state pending|success|failed.
		state := string(s.State)
		if s.State == CommitFailure {
			state = "failed"
		}
		target = fmt.Sprintf("%s/api/v4/projects/%s/statuses/%s", base, url.PathEscape(path), sha)
		body = map[string]any{"state": state, "name": s.Context, "description": s.Description}
		header.Set("PRIVATE-TOKEN", ep.Token)
	case v1alpha1.ProviderBitbucket:
		// POST /2.0/repositories/{workspace}/{repo_slug}/commit/{sha}/statuses/build: state
		// INPROGRESS|SUCCESSFUL|FAILED, a key of at most 40 characters, a url it requires.
		state := map[CommitState]string{CommitPending: "INPROGRESS", CommitSuccess: "SUCCESSFUL", CommitFailure: "FAILED"}[s.State]
		target = fmt.Sprintf("%s/2.0/repositories/%s/%s/commit/%s/statuses/build", base, url.PathEscape(owner), url.PathEscape(name), sha)
		key := s.Context
		if len(key) > 40 {
			key = key[:40]
		}
		if link == "" {
			link = "https://flotilla.dev/"
		}
		body = map[string]any{"key": key, "name": s.Context, "state": state, "description": s.Description, "url": link}
		header.Set("Authorization", "Bearer "+ep.Token)
	default:
		return nil, fmt.Errorf("provider type %q takes no commit status (github, gitlab, gitea or bitbucket)", ep.Type)
	}
	if link != "" && ep.Type != v1alpha1.ProviderBitbucket {
		body["target_url"] = link
	}
	if err := endpoint.CheckURL(target); err != nil {
		return nil, err
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest(http.MethodPost, target, bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	req.Header = header
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "flotilla-hub")
	return req, nil
}
