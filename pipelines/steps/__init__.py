"""What a training step does besides its GRPO update, apart from the train stage so that its loop reads on its
own: draw and judge the step's groups (`groups`: the preflight stage makes step 1's the same way), validate the
newest checkpoint (`validation`), act on the reward-hacking sentinel (`on_drift`), and the bookkeeping after its
update that both training loops share (`bookkeeping`: its cost, trackers, console line, sentinel, budget)."""
