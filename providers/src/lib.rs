//! LLM provider clients. Each turns a vendor response into the retry router's normalised response.
