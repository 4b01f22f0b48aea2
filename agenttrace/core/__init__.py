"""What every stage shares, free of torch: the chat-model protocol and its `Generation` record
(chat.py), tools and their argument check (tools.py), the decision table (decisions.py), the
speculation cost model (costmodel.py) and the roofline records (roofline.py). Stages import this
package and the stages before them; nothing here imports a stage."""
