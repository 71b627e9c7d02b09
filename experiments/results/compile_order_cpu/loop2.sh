#!/bin/bash
# two CPUs, unpinned: compiles beside (the rule) vs in turn (affinity reported as one CPU via sitecustomize)
cd /tmp/two
for r in 1 2 3; do for row in pqn-Breakout-MinAtar sac-Pendulum-v1 ppo-CartPole-v1; do for v in beside inturn; do
 out=/tmp/two/${row}_${v}_$r
 if [ $v = inturn ]; then export ONE_CPU_RULE=1; else unset ONE_CPU_RULE; fi
 PYTHONPATH=/tmp/frozen2:/tmp/two/patch jaxspreeze score --rows $row --seeds 1 --sides jaxspreeze --no-warm --out $out > $out.log 2>&1
 python -c "
import json;d=json.load(open('$out/score.json'));x=d['runs'][0];r=x['row']
print('$row $v $r', round(r['compile_s'],2), round(r.get('command_to_threshold_s') or -1,2), round(x['process_s'],2), round(x['load_start'],2), flush=True)"
done; done; done
