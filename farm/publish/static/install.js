// farm's compatibility pages (farm/publish/compat.py writes this file as compat/install.js): a
// wheel's install commands for the index the page is served from, each with a copy button. The
// commands name the wheel and each farm wheel it pins by URL and sha256, and no index
// (farm.model.install.commands writes the same text in Python; the tests hold the two equal). On a project
// page it fills each wheel's section; the find page uses it through window.farmInstall.
window.farmInstall=(function(){
var root=new URL(document.body.dataset.root,location.href).href;
var data=JSON.parse(document.getElementById('farm-wheels').textContent);
function commands(w){
  var args=[w].concat(w.pins).map(function(p){return '"'+p.project+' @ '+root+p.url+'#sha256='+p.sha256+'"';});
  return ['pip install '+args.join(' '),'uv pip install '+args.join(' ')];
}
function legacyCopy(text){  // no Clipboard API outside a secure context (an index on plain http)
  var t=document.createElement('textarea');t.value=text;t.setAttribute('readonly','');
  t.style.position='fixed';t.style.opacity='0';document.body.appendChild(t);t.select();
  var ok=false;try{ok=document.execCommand('copy');}catch(e){ok=false;}
  document.body.removeChild(t);return ok;
}
function copyButton(text,label){
  var b=document.createElement('button');b.type='button';b.className='copy';b.textContent=label||'copy';
  b.title=text;b.dataset.copy=text;
  b.addEventListener('click',function(){
    function done(ok){b.textContent=ok?'copied':'select and copy';}
    if(navigator.clipboard&&window.isSecureContext){
      navigator.clipboard.writeText(text).then(function(){done(true);},function(){done(legacyCopy(text));});
    }else{done(legacyCopy(text));}
  });
  return b;
}
function line(box,text){
  var div=document.createElement('div');div.className='cmd';
  var c=document.createElement('code');c.textContent=text;div.appendChild(c);div.appendChild(copyButton(text));
  box.appendChild(div);
}
function note(box,text){var p=document.createElement('p');p.className='note';p.textContent=text;box.appendChild(p);}
function fill(box,w){
  box.textContent='';
  if(w.unresolved.length){
    note(box,'Not installable from here: it requires '+w.unresolved.join(', ')+', which this channel does not hold.');
    return;
  }
  if(w.torch_step){note(box,'torch '+w.torch+' for CUDA '+w.cuda+' first, unless it is installed:');line(box,w.torch_step);}
  var c=commands(w);note(box,(w.torch_step?'then, ':'')+'with pip or uv:');line(box,c[0]);line(box,c[1]);
}
var byName={};data.wheels.forEach(function(w){byName[w.filename]=w;});
document.querySelectorAll('section.wheel[data-filename]').forEach(function(s){
  var w=byName[s.dataset.filename];if(w&&w.devices)fill(s.querySelector('.install'),w);
});
return {data:data,commands:commands,copyButton:copyButton,fill:fill};
})();
