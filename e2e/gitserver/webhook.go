package gitserver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
)

// AnnouncePush delivers a GitHub push webhook of commit on branch of the repository at cloneURL
// to the hub's receiver at url, signed with secret, and returns the status the hub answered.
func AnnouncePush(url, secret, branch, cloneURL, commit string) (int, error) {
	body := fmt.Sprintf(`{"ref":"refs/heads/%s","after":%q,"repository":{"clone_url":%q}}`, branch, commit, cloneURL)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(body))
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
