"""A trained checkpoint taken out of autorl: a merged Hugging Face model or its PEFT adapter (`hf`), a GGUF
file for llama.cpp, Ollama and LM Studio with an Ollama Modelfile (`gguf`). `pipelines.export` runs them for
`autorl export` and writes the model card."""
