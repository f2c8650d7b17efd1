"""`--backend auto` by measurement: the engine that is fastest for this model on this machine.

A fixed rule cannot know: on one day OpenVINO ran yolox-nano 1.45x faster than ONNX Runtime here, on another 0.9x.
On first use of a model, every engine (and device) that can run it here is loaded in a child process of its own,
and the children are timed in turns (ROUNDS rounds of EDGE_AUTO_ROUND_S, 1 s, each, interleaved, so a busy moment
of the machine falls on every engine alike) running whole frames as the pipeline does (pre-processing, inference,
decoding): the highest throughput in a best round wins (load from elsewhere only slows a round down), and among
engines within CLOSE of it the one with the least CPU per frame (the kernel's count), since the difference is then
within the noise. How sure the pick is goes with it. The result is kept in ~/.cache/edge-inference/auto-backend.json
(EDGE_AUTO_CACHE) under a key made of the model files' hashes, the engines' versions and the machine (CPU, cores,
accelerators found). Later runs read the choice without importing any engine they will not use. The engines tried
and dropped leave nothing behind in the service's memory, and each must load within a time budget
(EDGE_AUTO_BUDGET_S, 120 s): an engine that cannot load and run a few inferences in it (a slow device, emulation, a
model too large for it) loses, and the others are still compared.
The service does not wait for a measurement: it serves on the engines' ranking's choice meanwhile and moves to the
measured pick once it is known (`superseded`). Serving, it checks the service's CPU time per frame against its
own once it has settled (`live_check`) and measures again in the background only when that has grown beyond a
margin: load from other programs slows frames down without changing which engine is fastest per frame.
`edge backends --bench MODEL` shows the table; EDGE_AUTO_MEASURE=0 chooses by the fixed ranking instead.
One measurement at a time on a machine, across processes (`measuring_on_this_machine`): a second process waits and
takes the first one's result; it waits no longer than a measurement can take (a holder stopped with Ctrl-Z or stuck
in a driver is named by its process id, and the waiter goes on by the ranking).

The modules: `figures` (what a measurement is, the pick), `candidates` (the engines that can run the model here, read
from the plan's `ModelFiles`), `store` (the key and the cache), `lock` (one measurement a machine), `timing` (the
children driven in turns), `worker` (a child), `decide` (`--backend auto` made concrete: the measured pick, else the
ranking), `choice` (the measured pick served, the background re-measuring), `watch` (what a detector on auto's pick
watches for). They
import `opening.py`, `model_files.py`, `machine.py`, `timings.py` and `detector.py` of `detection`, never the loader
(which imports them); none of them resolves a model's name again.
"""
