package openai

import (
	"encoding/json"
	"errors"
	"time"
)

type anthropicModel struct {
	ID        string `json:"id"`
	CreatedAt string `json:"created_at"`
}

type openaiModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func modelOf(m anthropicModel) openaiModel {
	var created int64
	if t, err := time.Parse(time.RFC3339, m.CreatedAt); err == nil {
		created = t.Unix()
	}
	return openaiModel{ID: m.ID, Object: "model", Created: created, OwnedBy: "anthropic"}
}

// ModelList translates a Messages API model list, or one model, into
// OpenAI's shape.
func ModelList(body []byte) ([]byte, error) {
	var v struct {
		Data *[]anthropicModel `json:"data"`
		anthropicModel
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, err
	}
	if v.Data == nil {
		if v.ID == "" {
			return nil, errors.New("neither a model nor a list of models")
		}
		return json.Marshal(modelOf(v.anthropicModel))
	}
	list := struct {
		Object string        `json:"object"`
		Data   []openaiModel `json:"data"`
	}{Object: "list", Data: make([]openaiModel, 0, len(*v.Data))}
	for _, m := range *v.Data {
		list.Data = append(list.Data, modelOf(m))
	}
	return json.Marshal(&list)
}
